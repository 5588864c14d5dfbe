# compiled: mypyc (setup.py builds each module whose first line this is)
"""The client shell: one asyncio connection per RESP client (RESP2/RESP3).

Hot path, per read: feed the RESP reader, run each complete command through
``Node.handle_command``, encode the replies and write them in one call (through
the output driver while the AOF is on: no reply before its records). A blocked
command holds back the rest of the pipeline until its reply comes through
``deliver``, with one exception: the ADDJOBs right behind a sync ADDJOB that
waits for its copies run at once, so a pipeline of them is replicated in
parallel rather than one job per round trip; their replies wait in ``slots``
and leave in order (the cluster answers one client's ADDJOBs in order), and
any other command waits for all of them. Which requests may run while ADDJOBs
wait is the Node's rule (``runs_while_adds_wait``, ``waits_for_copies``); what
this shell keeps is the order of the bytes on the socket. The rules that need
the socket are applied here: maxclients and protected-mode when a connection
is accepted, client-output-buffer-limit on asyncio's flow control.

This module is compiled with the core (setup.py, mypyc): ``ClientConnection``
is then a native class, and its read -> parse -> dispatch -> encode -> write
loop calls the reader, ``Node.handle_command`` and the encoder as C calls.
So it is typed, and it is not a subclass of ``asyncio.Protocol`` (a native
class cannot extend a Python class): asyncio and uvloop take any object with
the protocol's methods.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Final

from broker.client import Client
from broker.node import BLOCKED, Node
from protocol.resp import Error, ProtocolError, Reader, encode

log = logging.getLogger("server.resp")

# protected-mode: Redis' reply, word for word (networking.c), so that operators
# and tools recognise it.
DENIED: Final = (
    b"-DENIED Redis is running in protected mode because protected "
    b"mode is enabled and no password is set for the default user. "
    b"In this mode connections are only accepted from the loopback interface. "
    b"If you want to connect from external computers to Redis you "
    b"may adopt one of the following solutions: "
    b"1) Just disable protected mode sending the command "
    b"'CONFIG SET protected-mode no' from the loopback interface "
    b"by connecting to Redis from the same host the server is "
    b"running, however MAKE SURE Redis is not publicly accessible "
    b"from internet if you do so. Use CONFIG REWRITE to make this "
    b"change permanent. "
    b"2) Alternatively you can just disable the protected mode by "
    b"editing the Redis configuration file, and setting the protected "
    b"mode option to 'no', and then restarting the server. "
    b"3) If you started the server manually just for testing, restart "
    b"it with the '--protected-mode no' option. "
    b"4) Set up an authentication password for the default user. "
    b"NOTE: You only need to do one of the above things in order for "
    b"the server to start accepting connections from the outside.\r\n")


# How long a refused client may keep its connection open after our reply.
REFUSED_LINGER: Final = 2.0
# ClientConnection.queued when no command waits (shared: never appended to).
_NONE_QUEUED: Final[list] = []


def is_local(peer: Any) -> bool:
    """Redis' connIsLocal: a 127.* or ::1 peer (or a Unix socket, no address);
    an IPv4 loopback seen through an IPv6 socket counts too."""
    if not isinstance(peer, tuple) or not peer:
        return True
    ip = peer[0]
    return ip.startswith(("127.", "::ffff:127.")) or ip == "::1"


class ClientConnection:
    """One client socket (an asyncio protocol). Replies are written in batches,
    one write per read."""

    def __init__(self, server: Any) -> None:
        self.server: Any = server
        self.node: Node = server.node
        self.driver: Any = server.driver
        self.transport: Any = None
        # Set by connection_made (None only on a refused connection, which
        # never reads).
        self.client: Client = None  # type: ignore[assignment]
        self.reader: Any = None
        self.waiting = False    # a command of ours is blocked: hold back the rest
        self.closed = False
        self.overflow_check: Any = None  # timer while over the output buffer soft limit
        # Replies behind sync ADDJOBs still waiting for their copies, in order:
        # encoded bytes, or None for an ADDJOB's reply still to come. Never
        # starts with bytes: a reply ready before the first None is written.
        self.slots: deque = deque()
        self.held: Any = None   # the command (or ProtocolError) read while slots waited
        # Commands read (a read's, in one call) and not run yet: queued[queued_at:].
        self.queued: list = _NONE_QUEUED
        self.queued_at = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        node = self.node
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        cfg = node.config
        if len(node.clients) >= cfg.maxclients:
            self.refuse(b"-ERR max number of clients reached\r\n")
            return
        if cfg.protected_mode and not cfg.requirepass and not is_local(peer):
            self.refuse(DENIED)
            return
        sock_obj = transport.get_extra_info("socket")
        client = self.client = node.new_client(
            _fmt_addr(peer), _fmt_addr(sock), sock_obj.fileno() if sock_obj is not None else -1)
        client.conn = self
        self.reader = Reader(max_bulk_len=cfg.proto_max_bulk_len,
                             max_query_buffer=cfg.client_query_buffer_limit)
        self.apply_output_limits()

    def refuse(self, reply: bytes) -> None:
        """Send ``reply`` and hang up, before anything is read. The reply is
        followed by our FIN while what the client sends meanwhile is read and
        dropped: closing with unread input would make the kernel send a reset,
        which can destroy the reply before the client reads it."""
        self.node.stats["rejected_connections"] += 1
        self.closed = True          # data_received ignores what comes
        t = self.transport
        t.write(reply)
        if t.can_write_eof():
            t.write_eof()
            self.server.loop.call_later(REFUSED_LINGER, t.close)
        else:
            t.close()

    # -- client-output-buffer-limit (class "normal"), on asyncio's flow control:
    # the transport calls pause_writing() once its buffer passes the high-water
    # mark, so the write path itself pays nothing.
    def apply_output_limits(self) -> None:
        lim = self.node.config.client_output_buffer_limit.get("normal")
        marks = [x for x in (lim.hard, lim.soft) if x] if lim is not None else []
        if marks:
            self.transport.set_write_buffer_limits(high=min(marks))
        else:
            self.transport.set_write_buffer_limits()    # asyncio's defaults, no limit

    def pause_writing(self) -> None:
        self.check_output_buffer(self.node.clock())

    def resume_writing(self) -> None:
        if self.overflow_check is not None:
            self.overflow_check.cancel()
            self.overflow_check = None

    def check_output_buffer(self, soft_since: int) -> None:
        """Over the hard limit: disconnect now; over the soft one for
        soft-seconds: disconnect; else look again shortly (as Redis does)."""
        self.overflow_check = None
        lim = self.node.config.client_output_buffer_limit.get("normal")
        if self.closed or lim is None:
            return
        size = self.transport.get_write_buffer_size()
        now = self.node.clock()
        over_soft = lim.soft and size > lim.soft
        if (lim.hard and size > lim.hard) or (
                over_soft and now - soft_since >= lim.soft_seconds * 1000):
            log.warning("Client %s closed for overcoming of output buffer limits.",
                        self.client.addr)
            self.closed = True
            self.transport.abort()          # drop what it never read
            self.node.client_closed(self.client)
            return
        if lim.hard or over_soft:
            self.overflow_check = self.server.loop.call_later(
                0.05, self.check_output_buffer, soft_since if over_soft else now)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self.node.net_input_bytes += len(data)
        try:
            self.reader.feed(data)
        except ProtocolError as e:
            self.protocol_error(e)
            return
        if not self.waiting:
            self.process()
        elif self.reader.pending() > self.reader.max_query_buffer:
            # Blocked: nothing is parsed meanwhile, so the limit is checked here.
            self.protocol_error(ProtocolError("ERR Protocol error: query buffer limit exceeded"))
            return
        self.driver.after_input()

    def process(self) -> None:
        """Run every complete buffered command until one blocks."""
        node = self.node
        client = self.client
        reader = self.reader
        out: list[bytes] = []
        slots = self.slots
        queued = self.queued
        i = self.queued_at
        argv: Any
        while True:
            argv = self.held
            if argv is not None:
                self.held = None
            elif i < len(queued):
                argv = queued[i]
                i += 1
            else:
                queued = _NONE_QUEUED
                i = 0
                try:
                    queued = reader.commands()
                except ProtocolError as e:
                    if slots:       # after the replies still to come
                        self.held = e
                        self.waiting = True
                        break
                    if out:
                        self.write(b"".join(out))
                    self.protocol_error(e)
                    return
                if not queued:
                    break
                continue        # run them from the list
            if slots and not node.runs_while_adds_wait(argv):
                self.held = argv    # runs once every waiting ADDJOB is answered
                self.waiting = True
                break
            reply = node.handle_command(client, argv)
            if reply is BLOCKED:
                if node.waits_for_copies(client):
                    slots.append(None)  # a sync ADDJOB: its reply comes later
                    continue
                self.waiting = True
                break
            # (client.proto read again: HELLO may have switched this reply's protocol)
            if client.closing:      # QUIT, CLIENT KILL, SHUTDOWN (no reply): stop here
                if reply is not None:
                    out.append(encode(reply, client.proto))
                break
            if slots:
                slots.append(encode(reply, client.proto))
            else:
                out.append(encode(reply, client.proto))
        if i < len(queued):
            self.queued = queued
            self.queued_at = i
        else:               # none left: no argv kept alive until the next read
            self.queued = _NONE_QUEUED
            self.queued_at = 0
        if out:
            data = b"".join(out)    # one reply: join returns it as is
            node.net_output_bytes += len(data)
            if self.driver.aof is None:     # no AOF: nothing to wait for, no extra call
                self.transport.write(data)
            else:
                self.driver.write_reply(self, data)
        if client.closing:
            self.close()
        else:
            client.last_interaction = node.clock()

    def deliver(self, reply: Any) -> None:
        """A reply produced later (unblocked GETJOB, sync ADDJOB, MONITOR line)."""
        if self.closed:
            return
        data = encode(reply, self.client.proto)
        slots = self.slots
        if slots:
            # The oldest waiting ADDJOB's reply (the cluster answers them in
            # order), then every reply ready after it.
            slots.popleft()
            ready: list[bytes] = [data]
            while slots and slots[0] is not None:
                ready.append(slots.popleft())
            data = b"".join(ready)
        self.node.net_output_bytes += len(data)
        self.write(data)
        if slots:
            return
        if self.held is not None:
            if self.held.__class__ is ProtocolError:
                self.protocol_error(self.held)
                return
            self.waiting = False
            self.process()
        elif self.waiting and self.client.blocked_on is None:
            self.waiting = False
            if self.client.closing:
                self.close()
            elif self.queued_at < len(self.queued) or self.reader.pending():
                self.process()

    def write(self, data: bytes) -> None:
        """Send reply bytes, through the driver: no reply before its records."""
        self.driver.write_reply(self, data)

    def write_now(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def protocol_error(self, e: Any) -> None:
        log.info("Protocol error from client %s: %s", self.client.addr, e)
        self.write(encode(Error(str(e)), 2))
        self.close()

    def close(self) -> None:
        if not self.closed:
            driver = self.driver
            if driver.held or driver.waiting:   # persistence: held replies go out first
                driver.flush(True)
            self.closed = True
            self.transport.close()
            self.node.client_closed(self.client)

    def eof_received(self) -> bool | None:
        return None             # (asyncio.Protocol's default: the transport closes itself)

    def connection_lost(self, exc: Any) -> None:
        if not self.closed and self.client is not None:
            self.closed = True
            self.node.client_closed(self.client)
        if self.client is not None:
            # Client <-> connection is a cycle: broken here, both go by reference
            # counting now, not at the collector's next full pass (an idle node
            # may make none for long, and the memory they sit in stays taken).
            self.client.conn = None
        self.driver.after_input()


def _fmt_addr(addr: Any) -> str:
    if not addr:
        return ""
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(addr)
