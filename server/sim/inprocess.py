"""A whole node in this process, without sockets: Config -> Node (with the
command table, rename-command applied) + Cluster + the output driver, composed
as the process composes its node (server/compose.py), on a clock the caller
sets.

What it is for:
- fast tests of argument parsing and reply shapes, driven on the node directly
  (``node.call("ADDJOB", "q", "x", 0)`` returns the reply value;
  ``node.resp("INFO", proto=3)`` the bytes a RESP client would read);
- the simulator's broker nodes (server/sim/broker_node.py), with a simulated
  disk (server/sim/disk.py) written by the server's AOF writer (server/aof.py);
- any new shell's tests (HTTP...): they plug in exactly as that shell does in
  the process: ``client = node.new_client(conn)`` with ``conn`` an object having
  ``deliver(reply)`` (later replies: unblocked GETJOB, sync ADDJOB) and
  ``write_now(reply)`` (immediate replies, released once their records are
  written), then ``node.run(client, argv)``.

Nodes are ``strict``: an exception in our own code propagates (a bug fails the
test), where the process would log it and count it in INFO ``internal_errors``.
"""

from __future__ import annotations

import random
from typing import NoReturn

from broker.config import Config
from broker.node import BLOCKED, Host
from cluster.membership import Membership
from protocol.resp import encode
from server.aof import AppendOnlyFile
from server.aof_runtime import AOFRuntime
from server.compose import compose_node
from server.sim.clock import TimeView, Timers, VirtualClock, VirtualLoop


class ProcessExit(BaseException):
    """The node's process exits on the spot (where the AOF writer stops the
    process: a failed write under appendfsync always): nothing after it runs,
    no held reply or bus message leaves."""


def exit_now() -> NoReturn:
    raise ProcessExit


class Done:
    """A future whose work is done (RunNow's)."""

    __slots__ = ("value", "error")

    def __init__(self, value=None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error

    def done(self) -> bool:
        return True

    def exception(self) -> BaseException | None:
        return self.error

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value

    def add_done_callback(self, fn) -> None:
        fn(self)


class RunNow:
    """The AOF writer's background executor, in virtual time: the work runs at
    once (a disk takes no time). A failed I/O is the work's result, as in the
    process's thread; any other exception is a bug and propagates."""

    def submit(self, fn, *args) -> Done:
        try:
            return Done(fn(*args))
        except OSError as e:
            return Done(error=e)

    def shutdown(self, wait: bool = True) -> None:
        pass


def simulated_runtime(disk, clock, post) -> AOFRuntime:
    """What the AOF writer runs on in virtual time: ``disk`` (server/sim/disk.py),
    work done at once, timers through ``post(delay_ms, timer)``, the node's
    ``clock`` (ms), and a ProcessExit where the process would exit."""
    return AOFRuntime(disk, RunNow(), VirtualLoop(post), TimeView(clock), exit_now)


class Replies:
    """A client's connection as a test sees it: every reply, in order."""

    def __init__(self, on_reply=None) -> None:
        self.replies: list = []
        self.on_reply = on_reply
        self.closed = False

    def write_now(self, reply) -> None:
        if self.on_reply is not None:
            self.on_reply(reply)
        else:
            self.replies.append(reply)

    deliver = write_now

    def close(self) -> None:
        self.closed = True


class InProcessNode:
    def __init__(self, config: Config | None = None, *, clock=None, rng=None,
                 saved_nodes_conf: str | None = None, address=None,
                 membership: Membership | None = None, host: Host | None = None,
                 disk=None, bus=None, on_event=None, strict: bool = True) -> None:
        """Composed as the process composes its node (server/compose.py).
        ``saved_nodes_conf``: the node table to start from (None: a fresh id);
        ``address``: (ip, port, bus port) announced, by default 127.0.0.1 and the
        config's ports; ``membership``: a table already built (tests on a real
        bus). ``bus``: where bus messages go: by default kept in ``self.sent``;
        an object with ``send_output(send)`` gets the Send outputs; a real
        ClusterBus (server/bus.py) gets encoded frames."""
        self.config = config if config is not None else Config()
        self.clock = clock if clock is not None else VirtualClock()
        self.sent: list = []            # the Send outputs, when no bus is given
        self.saved_nodes_conf = None
        bus = bus if bus is not None else self
        self.node, self.cluster, self.driver = compose_node(
            self.config, clock=self.clock, rng=rng if rng is not None else random.Random(0),
            host=host, saved_nodes_conf=saved_nodes_conf, membership=membership,
            address=address or ("127.0.0.1", self.config.port, self.config.effective_bus_port),
            bus=bus, encode=not hasattr(bus, "send_output"),
            save_nodes_conf=self._save_nodes_conf, on_event=on_event, strict=strict)
        self.timers = Timers(self.clock)     # the AOF writer's, in virtual time
        self.disk = disk
        if disk is not None and self.config.appendonly:
            self.load_from(disk)

    # -- the bus, when the caller keeps what is sent ----------------------------
    def send_output(self, out) -> None:
        self.sent.append(out)

    def drop_link(self, node_id, forget) -> None: ...

    def _save_nodes_conf(self, text: str) -> None:
        self.saved_nodes_conf = text

    # -- persistence --------------------------------------------------------------
    def load_from(self, disk) -> None:
        """The server's AOF writer over the disk, in virtual time: it loads
        what the disk kept (as the process at start; AOFLoadError when it
        cannot), then logs to it."""
        aof = AppendOnlyFile(self.node, self.config,
                             simulated_runtime(disk, self.clock, self.post_timer))
        self.driver.set_aof(aof)
        aof.load_now()

    def post_timer(self, delay_ms: int, timer) -> None:
        """The writer's timers (its cron, its rewrite's slices) run as this
        node's clock moves on."""
        self.timers.post(delay_ms, timer)

    # -- clients ---------------------------------------------------------------------
    def new_client(self, conn=None, addr: str = "inprocess"):
        client = self.node.new_client(addr=addr)
        client.conn = conn if conn is not None else Replies()
        return client

    def run(self, client, argv: list) -> None:
        """One command from `client`: its reply reaches client.conn (now, or once
        its records are written, or later for a blocked command)."""
        reply = self.node.handle_command(client, argv)
        if reply is not BLOCKED:
            self.driver.write_reply(client.conn, reply)
        self.driver.after_input()
        self.timers.run_due()

    def call(self, *args, client=None):
        """Run a command from a fresh (or the given) client; returns its reply,
        or BLOCKED if none came yet."""
        if client is None:
            client = self.new_client()
        conn = client.conn
        before = len(conn.replies)
        self.run(client, [a if isinstance(a, bytes) else str(a).encode() for a in args])
        return conn.replies[before] if len(conn.replies) > before else BLOCKED

    def resp(self, *args, proto: int = 2, client=None) -> bytes:
        """The reply as a RESP client would read it."""
        if client is None:
            client = self.new_client()
            client.proto = proto
        return encode(self.call(*args, client=client), client.proto)

    # -- time ------------------------------------------------------------------------
    def tick(self) -> None:
        self.driver.tick()
        self.timers.run_due()

    def advance(self, ms: int) -> None:
        """Move the clock forward, running the timers as the process would."""
        end = self.clock.now + ms
        while self.clock.now < end:
            self.clock.now = min(end, max(self.clock.now + 1,
                                          min(self.node.next_deadline(), end)))
            self.tick()

    # -- the bus -------------------------------------------------------------------------
    def bus_message(self, link, msg) -> None:
        self.driver.bus_message(link, msg, self.clock())
        self.timers.run_due()

    def link_up(self, node_id: str) -> None:
        self.driver.link_up(node_id, self.clock())
        self.timers.run_due()

    def link_down(self, node_id: str) -> None:
        self.driver.link_down(node_id, self.clock())
        self.timers.run_due()
