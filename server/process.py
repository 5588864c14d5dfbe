"""The process: the one place where a node is composed and run.

Config -> Node (broker/node.py, with the command table of broker/commands/) +
Cluster (cluster/cluster.py, over the node table loaded from nodes.conf) + the
output driver (server/driver.py) + the shells: client connections
(server/resp.py), the cluster bus (server/bus.py), the AOF file (server/aof.py);
plus the timer, signals, and the effects the core asks for (ServerHost). No
decisions are made here.

Also ``main()``: ``disquette-server`` / ``python -m broker``.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import random
import signal
import sys
import time

from broker.commands import COMMANDS, renamed
from broker.commands.connection import VERSION
from broker.config import Config, ConfigError
from broker.dispatch import CommandError
from broker.node import Host, Node
from cluster.cluster import Cluster, announced_address
from cluster.membership import Membership
from protocol.resp import HiredisReader, Reader
from server import listeners
from server.aof import AOFLoadError, AppendOnlyFile
from server.bus import ClusterBus
from server.driver import OutputDriver
from server.http import HttpServer
from server.resp import ClientConnection
from server.seeds import Seeder
from server.tls import TLSConfigError, build_contexts, tls_wanted

log = logging.getLogger("server")


try:    # glibc: hand the free pages inside the heap back to the system
    _malloc_trim = ctypes.CDLL(None).malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


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

    @property
    def multiplexing_api(self) -> str:
        loop = self.server.loop
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"

    @property
    def resp_parser(self) -> str:
        return "hiredis" if Reader is HiredisReader else "python"

    def rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0

    def release_memory(self) -> None:
        if _malloc_trim is not None:
            _malloc_trim(0)

    def cpu(self) -> tuple[float, float]:
        t = os.times()
        return t.system, t.user

    def aof_info(self):
        aof = self.server.aof
        return aof.info_fields() if aof is not None else None

    def bgrewriteaof(self) -> str:
        aof = self.server.aof
        if aof is None:
            raise CommandError("ERR AOF is not enabled")
        return aof.start_rewrite()

    def debug_loadaof(self) -> None:
        aof = self.server.aof
        if aof is None:
            raise CommandError("ERR AOF is not enabled")
        aof.debug_loadaof()


class Server:
    def __init__(self, config: Config, argv: list[str]) -> None:
        self.config = config
        self.argv = argv
        self.loop = asyncio.get_event_loop()
        self.host = ServerHost(self)
        rng = random.Random(int.from_bytes(os.urandom(16), "big"))
        membership = load_membership(config, rng)
        self.node = Node(config, wall_ms, rng, self.host, node_id=membership.node_id,
                         perf_ns=time.perf_counter_ns, commands=command_table(config))
        self.cluster = Cluster(self.node, membership)
        self.aof: AppendOnlyFile | None = None
        self.driver = OutputDriver(
            self.node, self.cluster, wake=self.wake_flush, arm_timer=self.arm_timer,
            save_nodes_conf=lambda text: save_nodes_conf(self.config, text))
        self.bus = None
        self.listeners = []
        self.http = None            # the HTTP shell (ext), when http-port is set
        # TLS (server/tls.py): the contexts, the client TLS listeners (one
        # server per socket, re-served when the contexts change, in order).
        self.tls = build_contexts(config) if tls_wanted(config) else None
        self.tls_listeners: list = []
        self.tls_port_open = 0
        self.tls_port_changes = 0
        self._tls_relisten = asyncio.Lock()
        self.seeder = Seeder(self)
        self.timer = None
        self.stopped = asyncio.Event()
        self.shutdown_mode = None
        self.exit_code = 0
        self._flush_handle = None
        self.load_task = None
        config.watchers.append(self.config_changed)
        self.idle_check_at = 0      # next check of the `timeout` directive, ms

    # -- event plumbing --------------------------------------------------
    def wake_flush(self) -> None:
        """The driver flushes once per event-loop turn: one AOF write (and fsync)
        and one bus frame per peer for everything the turn produced."""
        if self._flush_handle is None:
            self._flush_handle = self.loop.call_soon(self.flush)

    def flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self.driver.flush()

    def arm_timer(self, deadline: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(max(0.0, (deadline - wall_ms()) / 1000),
                                          self.on_timer)

    def on_timer(self) -> None:
        self.timer = None
        if self.config.timeout:
            self.close_idle_clients()
        self.driver.tick()

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
    def on_bus_message(self, link, msg) -> None:
        self.driver.bus_message(link, msg, wall_ms())

    def on_link_up(self, node_id: str) -> None:
        self.driver.link_up(node_id, wall_ms())

    def on_link_down(self, node_id: str) -> None:
        self.driver.link_down(node_id, wall_ms())

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        bus_tls = self.tls if cfg.tls_cluster else None
        self.bus = ClusterBus(self.on_bus_message, host=cfg.bind or ["127.0.0.1"],
                              port=cfg.effective_bus_port, on_link_up=self.on_link_up,
                              on_link_down=self.on_link_down,
                              max_frame_size=cfg.proto_max_bulk_len + (1 << 20),
                              ssl_server=bus_tls and bus_tls.bus_server,
                              ssl_client=bus_tls and bus_tls.bus_client,
                              secrets=cfg.cluster_secrets())
        self.bus.set_routes(cfg.cluster_bus_route)
        await self.bus.start()
        self.driver.bus = self.bus
        save_nodes_conf(cfg, self.cluster.m.to_nodes_conf())
        for addr in (cfg.bind or ["127.0.0.1"]) if cfg.port else ():    # port 0: no plaintext
            srv = await self.loop.create_server(
                lambda: ClientConnection(self), host=addr, port=cfg.port,
                backlog=cfg.tcp_backlog, reuse_address=True)
            self.listeners.append(srv)
        if cfg.http_port:
            self.http = HttpServer(self.node, self.driver, aof=lambda: self.aof)
            await self.http.start(cfg.http_bind.split() or cfg.bind or ["127.0.0.1"],
                                  cfg.http_port, backlog=cfg.tcp_backlog)
        if cfg.tls_port:
            self.tls_listeners = await listeners.serve(
                lambda: ClientConnection(self),
                listeners.bind(cfg.bind or ["127.0.0.1"], cfg.tls_port, cfg.tcp_backlog),
                self.tls.clients)
            self.tls_port_open = cfg.tls_port
        if cfg.port:
            log.info("Ready to accept connections on port %d", cfg.port)
        if cfg.tls_port:
            log.info("Ready to accept TLS connections on port %d", cfg.tls_port)
        self.seeder.start()
        if cfg.appendonly:
            # Loaded in chunks while clients get -LOADING (SPEC: PING within 1 s).
            self.load_task = self.loop.create_task(self.load_aof())
        self.driver.after_input()

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
        self.seeder.stop()
        for srv in self.listeners + self.tls_listeners:
            srv.close()
        if self.load_task is not None and not self.load_task.done():
            self.load_task.cancel()
        self.flush()
        for client in list(self.node.clients.values()):
            if client.conn is not None:
                client.conn.close()
        if self.aof is not None:
            self.aof.append(self.node.take_records())
            self.aof.shutdown(self.shutdown_mode)
        save_nodes_conf(self.config, self.cluster.m.to_nodes_conf())
        self.flush()
        if self.http is not None:
            await self.http.stop()
        if self.bus is not None:
            await self.bus.close()
        if self.timer is not None:
            self.timer.cancel()
        remove_pidfile(self.config)
        log.warning("Disquette is now ready to exit, bye bye...")

    def restart(self) -> None:
        """DEBUG RESTART: re-exec the same command line."""
        if self.aof is not None:
            self.flush()
            self.aof.shutdown("default")
        remove_pidfile(self.config)
        for srv in self.listeners + self.tls_listeners:
            srv.close()
        os.execv(sys.executable, [sys.executable, "-m", "broker", *self.argv])

    # -- persistence -------------------------------------------------------
    def attach_aof(self, aof: AppendOnlyFile | None) -> None:
        self.aof = aof
        self.driver.set_aof(aof)

    async def load_aof(self) -> None:
        aof = AppendOnlyFile(self.node, self.config, self.loop)
        self.attach_aof(aof)
        try:
            await aof.load()
        except AOFLoadError as e:
            log.warning("%s", e)
            log.warning("Refusing to start with a damaged append only file.")
            self.flush()
            aof.state = "off"
            aof.stop()
            self.attach_aof(None)
            self.exit_code = 1
            self.request_shutdown("nosave")
            return
        self.flush()
        self.driver.after_input()

    def config_changed(self, name: str) -> None:
        """Config watcher: what the process applies at run time (raising
        ConfigError refuses the change)."""
        node = self.node
        if name == "appendonly":
            if self.config.appendonly and self.aof is None:
                aof = AppendOnlyFile(self.node, self.config, self.loop)
                try:
                    aof.enable_at_runtime()
                except CommandError:
                    aof.stop()
                    raise ConfigError("Unable to turn on AOF. Check server logs.") from None
                self.attach_aof(aof)
            elif not self.config.appendonly and self.aof is not None:
                if node.loading:
                    raise ConfigError("Can't turn off the AOF while it is loading")
                self.flush()
                self.aof.stop()
                self.attach_aof(None)
        elif name == "dir":
            # chdir at once (as Redis); refused if that fails.
            try:
                os.chdir(self.config.dir)
            except OSError as e:
                raise ConfigError(f"CONFIG SET failed (possibly related to argument "
                                  f"'dir') - {e.strerror}") from None
        elif name == "appendfsync" and self.aof is not None:
            self.aof.flush(fsync=True)
        elif name == "loglevel":
            logging.getLogger().setLevel(LOGLEVELS[self.config.loglevel])
        elif name == "client-output-buffer-limit":
            for client in list(node.clients.values()):
                if client.conn is not None and not client.conn.closed:
                    client.conn.apply_output_limits()
        elif name.startswith("tls-"):
            self.reconfigure_tls(name)
        elif name == "cluster-bus-route" and self.bus is not None:
            self.bus.set_routes(self.config.cluster_bus_route)
        elif name.startswith("cluster-auth-pass") and self.bus is not None:
            tls = self.tls if self.config.tls_cluster else None
            self.bus.configure(tls and tls.bus_server, tls and tls.bus_client,
                               self.config.cluster_secrets())

    # -- TLS at run time ----------------------------------------------------
    def reconfigure_tls(self, name: str) -> None:
        """A tls-* directive changed: new contexts (refused, as Redis does, if
        they cannot be built), then the client TLS listeners and the bus take
        them; established connections are kept."""
        cfg = self.config
        try:
            tls = build_contexts(cfg) if tls_wanted(cfg) else None
        except TLSConfigError as e:
            log.warning("%s", e)
            raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - "
                              f"Unable to update TLS configuration. Check server logs. "
                              f"({e})") from None
        socks = []
        if cfg.tls_port != self.tls_port_open:
            try:
                socks = listeners.bind(cfg.bind or ["127.0.0.1"], cfg.tls_port,
                                       cfg.tcp_backlog) if cfg.tls_port else []
            except OSError as e:
                log.warning("Could not listen on TLS port %d: %s", cfg.tls_port, e)
                raise ConfigError(f"CONFIG SET failed (possibly related to argument "
                                  f"'{name}') - Unable to listen on this port. Check "
                                  f"server logs. ({e.strerror or e})") from None
            listeners.close(self.tls_listeners)      # the old port stops now
            self.tls_listeners = []
            self.tls_port_open = cfg.tls_port
            self.tls_port_changes += 1
        self.tls = tls
        if socks or (self.tls_listeners and tls is not None):
            self.loop.create_task(self.serve_tls(socks, tls.clients, self.tls_port_changes))
        if self.bus is not None:
            bus_tls = tls if cfg.tls_cluster else None
            self.bus.configure(bus_tls and bus_tls.bus_server, bus_tls and bus_tls.bus_client,
                               cfg.cluster_secrets())

    async def serve_tls(self, socks, ctx, port_changes: int) -> None:
        """Serve the sockets of a new tls-port, or (``socks`` empty) the current
        ones with a new context; in the order the changes came, unless the port
        changed again since."""
        async with self._tls_relisten:
            if port_changes != self.tls_port_changes:
                for sock in socks:
                    sock.close()
            elif socks:
                self.tls_listeners = await listeners.serve(
                    lambda: ClientConnection(self), socks, ctx)
            elif self.tls_listeners:
                self.tls_listeners = await listeners.reserve(
                    self.tls_listeners, lambda: ClientConnection(self), ctx)


def command_table(config: Config) -> dict:
    """The command table with the config's rename-command lines applied;
    ConfigError (Redis' fatal config error) for a line it refuses."""
    try:
        return renamed(COMMANDS, config.rename_commands)
    except ValueError as e:
        reason, line = e.args
        raise config.rename_error(line, reason) from None


# ----------------------------------------------------------------- nodes.conf
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
        print(f"Disquette server v={VERSION} (Disque 1.0-rc1 compatible)")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print("Usage: disquette-server [/path/to/disque.conf] [--directive value ...]\n"
              "       python -m broker [/path/to/disque.conf] [--port 7711] ...")
        return 0
    try:
        config = Config.from_argv(argv, os.getcwd())
        command_table(config)
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
    try:
        server = Server(config, argv)
    except TLSConfigError as e:
        log.warning("Failed to configure TLS. Check logs for more info. %s", e)
        remove_pidfile(config)
        loop.close()
        return 1
    try:
        loop.run_until_complete(server.run())
    except OSError as e:
        log.warning("Could not start: %s", e)
        remove_pidfile(config)
        return 1
    finally:
        loop.close()
    return server.exit_code
