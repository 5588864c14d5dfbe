"""The asyncio shell around one Node: listeners, client connections, the timer,
signals, and the effects the core asks for (Host). No decisions are made here.

Hot path, per read: feed the RESP reader, run each complete command through
``Node.handle_command``, encode the replies and write them in one call.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import signal
import sys
import time

from broker.aof import AOFLoadError, AppendOnlyFile
from broker.commands import CommandError
from broker.config import Config, ConfigError
from broker.node import BLOCKED, Host, Node
from cluster.bus import ClusterBus
from cluster.cluster import Cluster
from cluster.membership import DropLink, Membership, SaveConfig, Send
from protocol.bus import BATCH, BusProtocolError, encode_frame, unbatch
from protocol.resp import Error, ProtocolError, Reader, encode, get_encoder

log = logging.getLogger("broker.server")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000



class ClientConnection(asyncio.Protocol):
    """One client socket. Replies are written in batches, one write per read."""

    __slots__ = ("server", "node", "transport", "client", "reader", "waiting", "closed",
                 "overflow_check")

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.node = server.node
        self.transport = None
        self.client = None
        self.reader = None
        self.waiting = False    # a command of ours is blocked: hold back the rest
        self.closed = False
        self.overflow_check = None  # timer while over the output buffer soft limit

    def connection_made(self, transport) -> None:
        self.transport = transport
        node = self.node
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        if len(node.clients) >= node.config.maxclients:
            node.stats["rejected_connections"] += 1
            transport.write(b"-ERR max number of clients reached\r\n")
            transport.close()
            self.closed = True
            return
        sock_obj = transport.get_extra_info("socket")
        self.client = node.new_client(_fmt_addr(peer), _fmt_addr(sock),
                                      sock_obj.fileno() if sock_obj is not None else -1)
        self.client.conn = self
        cfg = node.config
        self.reader = Reader(max_bulk_len=cfg.proto_max_bulk_len,
                             max_query_buffer=cfg.client_query_buffer_limit)
        self.apply_output_limits()

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
        self.node.stats["total_net_input_bytes"] += len(data)
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
        self.server.after_event()

    def process(self) -> None:
        """Run every complete buffered command until one blocks."""
        node = self.node
        client = self.client
        gets = self.reader.gets
        handle = node.handle_command
        proto = client.proto
        enc = get_encoder(proto)    # the connection's encoder: no protocol lookup per reply
        out = []
        while True:
            try:
                argv = gets()
            except ProtocolError as e:
                if out:
                    self.write(b"".join(out))
                self.protocol_error(e)
                return
            if argv is False:
                break
            reply = handle(client, argv)
            if reply is BLOCKED:
                self.waiting = True
                break
            if client.proto != proto:  # HELLO switched protocol: this reply uses the new one
                proto = client.proto
                enc = get_encoder(proto)
            if client.closing:      # QUIT, CLIENT KILL, SHUTDOWN (no reply): stop here
                if reply is not None:
                    out.append(enc(reply))
                break
            out.append(enc(reply))
        if out:
            data = b"".join(out)    # one reply: join returns it as is
            node.stats["total_net_output_bytes"] += len(data)
            if self.server.held is None:    # no AOF: write() without its Python call
                self.transport.write(data)
            else:
                self.write(data)
        if client.closing:
            self.close()
        else:
            client.last_interaction = node.clock()

    def deliver(self, reply) -> None:
        """A reply produced later (unblocked GETJOB, sync ADDJOB, MONITOR line)."""
        if self.closed:
            return
        data = encode(reply, self.client.proto)
        self.node.stats["total_net_output_bytes"] += len(data)
        self.write(data)
        if self.waiting and self.client.blocked_on is None:
            self.waiting = False
            if self.client.closing:
                self.close()
            elif self.reader.pending():
                self.process()

    def write(self, data: bytes) -> None:
        """Send reply bytes; while the AOF has records not yet written, replies wait
        for Server.flush_before_sleep (persistence: no reply before its record)."""
        server = self.server
        held = server.held
        if held is None or (not held and not self.node.aof.pending):
            self.transport.write(data)
        else:
            held.append((self, data))
            server.wake_flush()

    def protocol_error(self, e: ProtocolError) -> None:
        log.info("Protocol error from client %s: %s", self.client.addr, e)
        self.write(encode(Error(str(e)), 2))
        self.close()

    def close(self) -> None:
        if not self.closed:
            if self.server.held:    # persistence: held replies go out first
                self.server.flush_before_sleep()
            self.closed = True
            self.transport.close()
            self.node.client_closed(self.client)

    def connection_lost(self, exc) -> None:
        if not self.closed and self.client is not None:
            self.closed = True
            self.node.client_closed(self.client)
        self.server.after_event()


def _fmt_addr(addr) -> str:
    if not addr:
        return ""
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(addr)


class ServerHost(Host):
    """The effects the Node may ask for, carried out for real."""

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.pid = os.getpid()

    def shutdown(self, mode: str) -> None:
        self.server.request_shutdown(mode)

    def close_client(self, client) -> None:
        if client.conn is not None:
            client.conn.close()

    def rewrite_config(self) -> None:
        cfg = self.server.config
        path = cfg.config_file
        try:
            with open(path, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        new = cfg.rewrite(old)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)   # DEBUG SLEEP blocks the whole server, as in Redis

    def crash(self) -> None:
        os.abort()

    def restart(self) -> None:
        self.server.restart()

    def rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    def cpu(self) -> tuple[float, float]:
        t = os.times()
        return t.system, t.user

    def config_changed(self, name: str) -> None:
        self.server.config_changed(name)


class Server:
    def __init__(self, config: Config, argv: list[str]) -> None:
        self.config = config
        self.argv = argv
        self.loop = asyncio.get_event_loop()
        self.host = ServerHost(self)
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        membership = load_membership(config, rng)
        self.node = Node(config, wall_ms, rng, self.host, node_id=membership.node_id,
                         perf_ns=time.perf_counter_ns)
        self.node.leaving = membership.leaving     # CLUSTER LEAVING survives restarts
        self.cluster = Cluster(self.node, membership)
        self.bus = None
        self.listeners = []
        self.timer = None
        self.timer_at = None
        self.stopped = asyncio.Event()
        self.shutdown_mode = None
        self.exit_code = 0
        # Persistence (broker/aof.py): replies held until the AOF records of this
        # event-loop turn are written (a list while the AOF is on, else None).
        self.held = None
        self._flush_handle = None
        self._bus_flush = None      # handle of the end-of-turn flush_bus, if due
        self.load_task = None
        config.validators.append(self.validate_config)
        config.validators.append(self.validate_dir)
        self.idle_check_at = 0      # next check of the `timeout` directive, ms

    # -- event plumbing --------------------------------------------------
    def after_event(self) -> None:
        """After any input: deliver replies for other clients, re-arm the timer."""
        node = self.node
        while node.outbox:
            outbox, node.outbox = node.outbox, []
            for client, reply in outbox:
                if client.conn is not None:
                    client.conn.deliver(reply)
        if self._bus_flush is None:
            cluster = self.cluster
            if cluster.out or cluster.batches:
                # Sent once per loop turn: one frame per peer for the whole turn.
                self._bus_flush = self.loop.call_soon(self.flush_bus)
        deadline = node.next_deadline()
        if self.timer_at is None or deadline < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = deadline
            self.timer = self.loop.call_later(max(0.0, (deadline - wall_ms()) / 1000),
                                              self.on_timer)

    def on_timer(self) -> None:
        self.timer = None
        self.timer_at = None
        self.node.tick()
        if self.config.timeout:
            self.close_idle_clients()
        self.after_event()

    def close_idle_clients(self) -> None:
        """The `timeout` directive: close clients idle that many seconds, once a
        second at most; blocked clients (their own TIMEOUT) and MONITORs are
        exempt, as in Redis."""
        now = wall_ms()
        if now < self.idle_check_at:
            return
        self.idle_check_at = now + 1000
        limit = self.config.timeout * 1000
        for client in list(self.node.clients.values()):
            if (now - client.last_interaction > limit and client.blocked_on is None
                    and not client.monitor and client.conn is not None):
                log.debug("Closing idle client %s", client.addr)
                client.conn.close()

    # -- cluster bus --------------------------------------------------------
    def flush_bus(self) -> None:
        """End of an event-loop turn: everything the cluster layer queued during the
        turn goes out, one frame (and one write) per peer."""
        self._bus_flush = None
        node = self.node
        if node.aof is not None and node.aof.pending:
            node.aof.flush()    # persistence: a job is logged before GOTJOB says so
        bus = self.bus
        if bus is None:
            self.apply_cluster_outputs(self.cluster.drain())
            return
        bus.cork()
        try:
            self.apply_cluster_outputs(self.cluster.drain())
        finally:
            bus.uncork()

    def apply_cluster_outputs(self, outputs) -> None:
        frames = {}     # a broadcast is encoded once
        for out in outputs:
            if isinstance(out, Send):
                frame = frames.get(id(out.msg))
                if frame is None:
                    try:
                        frame = frames[id(out.msg)] = encode_frame(out.msg)
                    except BusProtocolError as e:
                        if out.msg.type == BATCH:
                            # Too big for one frame: one frame per message.
                            self.apply_cluster_outputs(
                                [Send(out.node_id, out.ip, out.bus_port, m)
                                 for m in unbatch(out.msg)])
                            continue
                        log.warning("Not sending %s: %s", out.msg.type_name, e)
                        continue
                if self.bus is not None:
                    self.bus.send(out.node_id, out.ip, out.bus_port, frame)
            elif isinstance(out, DropLink):
                if self.bus is not None:
                    self.bus.drop_link(out.node_id, out.forget)
            elif isinstance(out, SaveConfig):
                save_nodes_conf(self.config, out.text)

    def on_bus_message(self, link, msg) -> None:
        self.cluster.handle_message(link, msg, wall_ms())
        self.after_event()

    def on_link_up(self, node_id: str) -> None:
        self.cluster.link_up(node_id, wall_ms())
        self.after_event()

    def on_link_down(self, node_id: str) -> None:
        self.cluster.link_down(node_id, wall_ms())
        self.after_event()

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        self.bus = ClusterBus(self.on_bus_message, host=cfg.bind or ["127.0.0.1"],
                              port=cfg.effective_bus_port, on_link_up=self.on_link_up,
                              on_link_down=self.on_link_down,
                              max_frame_size=cfg.proto_max_bulk_len + (1 << 20))
        await self.bus.start()
        save_nodes_conf(cfg, self.cluster.m.to_nodes_conf())
        for addr in cfg.bind or ["127.0.0.1"]:
            srv = await self.loop.create_server(
                lambda: ClientConnection(self), host=addr, port=cfg.port,
                backlog=cfg.tcp_backlog, reuse_address=True)
            self.listeners.append(srv)
        log.info("Ready to accept connections on port %d", cfg.port)
        if cfg.appendonly:
            # Loaded in chunks while clients get -LOADING (SPEC: PING within 1 s).
            self.load_task = self.loop.create_task(self.load_aof())
        self.after_event()

    def request_shutdown(self, mode: str) -> None:
        self.shutdown_mode = mode
        self.loop.call_soon(self.stopped.set)

    async def run(self) -> None:
        await self.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.request_shutdown, "signal")
        await self.stopped.wait()
        await self.stop()

    async def stop(self) -> None:
        log.warning("User requested shutdown...")
        for srv in self.listeners:
            srv.close()
        if self.load_task is not None and not self.load_task.done():
            self.load_task.cancel()
        self.flush_before_sleep()
        for client in list(self.node.clients.values()):
            if client.conn is not None:
                client.conn.close()
        if self.node.aof is not None:
            self.node.aof.shutdown(self.shutdown_mode)
        save_nodes_conf(self.config, self.cluster.m.to_nodes_conf())
        if self._bus_flush is not None:
            self._bus_flush.cancel()
            self.flush_bus()
        if self.bus is not None:
            await self.bus.close()
        if self.timer is not None:
            self.timer.cancel()
        remove_pidfile(self.config)
        log.warning("Disquette is now ready to exit, bye bye...")

    def restart(self) -> None:
        """DEBUG RESTART: re-exec the same command line."""
        if self.node.aof is not None:
            self.flush_before_sleep()
            self.node.aof.shutdown("default")
        remove_pidfile(self.config)
        for srv in self.listeners:
            srv.close()
        os.execv(sys.executable, [sys.executable, "-m", "broker", *self.argv])

    # -- persistence -------------------------------------------------------
    def new_aof(self) -> AppendOnlyFile:
        return AppendOnlyFile(self.node, self.config, self.loop, wake=self.wake_flush)

    async def load_aof(self) -> None:
        aof = self.new_aof()
        self.node.aof = aof
        self.held = []
        try:
            await aof.load()
        except AOFLoadError as e:
            log.warning("%s", e)
            log.warning("Refusing to start with a damaged append only file.")
            self.flush_before_sleep()
            aof.state = "off"
            aof.stop()
            self.node.aof = None
            self.held = None
            self.exit_code = 1
            self.request_shutdown("nosave")
            return
        self.after_event()

    def wake_flush(self) -> None:
        if self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self.flush_before_sleep)

    def flush_before_sleep(self) -> None:
        """Once per event-loop turn while the AOF is on: write (and under
        appendfsync always fsync) the records, then send the held replies."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        aof = self.node.aof
        if aof is not None:
            aof.flush()
        held = self.held
        if held:
            self.held = [] if aof is not None else None
            for conn, data in held:
                if not conn.closed:
                    conn.transport.write(data)

    def validate_config(self, name: str, value) -> None:
        """CONFIG SET appendonly yes|no acts before the value is stored, so that a
        failure leaves the setting as it was."""
        if name != "appendonly":
            return
        node = self.node
        if value and node.aof is None:
            aof = self.new_aof()
            try:
                aof.enable_at_runtime()
            except CommandError:
                aof.stop()
                raise ConfigError("Unable to turn on AOF. Check server logs.") from None
            node.aof = aof
            self.held = []
        elif not value and node.aof is not None:
            if node.loading:
                raise ConfigError("Can't turn off the AOF while it is loading")
            self.flush_before_sleep()
            node.aof.stop()
            self.held = None
            node.aof = None

    def validate_dir(self, name: str, value) -> None:
        """CONFIG SET dir: chdir at once (as Redis); refused if that fails."""
        if name == "dir":
            try:
                os.chdir(value)
            except OSError as e:
                raise ConfigError(f"CONFIG SET failed (possibly related to argument "
                                  f"'dir') - {e.strerror}") from None

    def config_changed(self, name: str) -> None:
        if name == "appendfsync" and self.node.aof is not None:
            self.node.aof.flush(fsync=True)
        elif name == "loglevel":
            logging.getLogger().setLevel(LOGLEVELS[self.config.loglevel])
        elif name == "client-output-buffer-limit":
            for client in list(self.node.clients.values()):
                if client.conn is not None and not client.conn.closed:
                    client.conn.apply_output_limits()
        elif name == "cluster-node-timeout":
            self.cluster.m.node_timeout = self.config.cluster_node_timeout
        elif name.startswith("cluster-announce"):
            self.cluster._collect(self.cluster.m.set_address(*announced_address(self.config)))


# ----------------------------------------------------------------- nodes.conf
def announced_address(config: Config) -> tuple[str, int, int]:
    """(ip, port, bus port) peers are told: the announce directives when set."""
    ip = config.cluster_announce_ip
    if not ip and config.bind and config.bind[0] not in ("0.0.0.0", "::", "*"):
        ip = config.bind[0]
    return (ip or "", config.cluster_announce_port or config.port,
            config.cluster_announce_bus_port or config.effective_bus_port)


def load_membership(config: Config, rng: random.Random) -> Membership:
    """The saved node table (same id, same peers) or a fresh one with a new id."""
    ip, port, bus_port = announced_address(config)
    try:
        with open(config.cluster_config_file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = None
    if text and text.strip():
        return Membership.from_nodes_conf(text, ip=ip, port=port, bus_port=bus_port, rng=rng,
                                          node_timeout=config.cluster_node_timeout,
                                          now=wall_ms())
    return Membership("%040x" % rng.getrandbits(160), ip, port, bus_port,
                      node_timeout=config.cluster_node_timeout, rng=rng, now=wall_ms())


def save_nodes_conf(config: Config, text: str) -> None:
    path = config.cluster_config_file
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("Could not save %s: %s", path, e)


# ---------------------------------------------------------------------- logging
LOGLEVELS = {"debug": logging.DEBUG, "verbose": 15, "notice": logging.INFO,
             "warning": logging.WARNING}
_LEVEL_MARK = {logging.DEBUG: ".", 15: "-", logging.INFO: "*", logging.WARNING: "#",
               logging.ERROR: "#", logging.CRITICAL: "#"}


class RedisFormatter(logging.Formatter):
    """pid:M 21 Nov 2026 19:28:53.123 * message  (the Redis log line)."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        stamp = time.strftime("%d %b %Y %H:%M:%S", t) + ".%03d" % record.msecs
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return f"{record.process}:M {stamp} {_LEVEL_MARK.get(record.levelno, '*')} {msg}"


def setup_logging(config: Config) -> None:
    logging.addLevelName(15, "VERBOSE")
    handler = (logging.FileHandler(config.logfile) if config.logfile
               else logging.StreamHandler(sys.stdout))
    handler.setFormatter(RedisFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LOGLEVELS.get(config.loglevel, logging.INFO))


def write_pidfile(config: Config) -> None:
    if config.pidfile:
        with open(config.pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")


def remove_pidfile(config: Config) -> None:
    if config.pidfile:
        try:
            os.unlink(config.pidfile)
        except OSError:
            pass


def tune_gc() -> None:
    """Jobs are long-lived GC-tracked objects, millions of them. With CPython's
    default schedule (a young collection every 700 allocations, a full one each
    time the heap grew 25%) the collector re-traverses every job about four
    times over its life: more than the job's own bookkeeping. Collect less
    often (jobs hold no reference cycles: they are freed by refcount whatever
    the schedule), and keep what exists at start-up (modules, config) out of
    every collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 20)


def daemonize() -> None:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-v", "--version"):
        from broker.commands.connection import VERSION
        print(f"Disquette server v={VERSION} (Disque 1.0-rc1 compatible)")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print("Usage: disquette-server [/path/to/disque.conf] [--directive value ...]\n"
              "       python -m broker [/path/to/disque.conf] [--port 7711] ...")
        return 0
    try:
        config = Config.from_argv(argv, os.getcwd())
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 1
    if config.daemonize:
        daemonize()
    try:
        os.chdir(config.dir)
    except OSError as e:
        print(f"Can't chdir to '{config.dir}': {e.strerror}", file=sys.stderr)
        return 1
    setup_logging(config)
    write_pidfile(config)
    try:
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    tune_gc()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    log.info("Disquette starting, pid=%d", os.getpid())
    server = Server(config, argv)
    try:
        loop.run_until_complete(server.run())
    except OSError as e:
        log.warning("Could not start: %s", e)
        remove_pidfile(config)
        return 1
    finally:
        loop.close()
    return server.exit_code
