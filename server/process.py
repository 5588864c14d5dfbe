"""The running process: the Server's event loop around one node.

The node is composed in server/compose.py (Node + Cluster + output driver, over
the node table saved in nodes.conf: server/nodes_conf.py); this module starts
the shells around it: client connections (server/resp.py), the cluster bus
(server/bus.py), the HTTP shell (server/http/), the AOF file (server/aof.py),
the seeds (server/seeds.py); and runs the inputs: sockets, the timer, signals,
shutdown and DEBUG RESTART. The effects the core asks for are ServerHost's
(server/host.py), run-time reconfiguration is server/reconfigure.py's, and the
process set-up around it (``main``) is server/main.py's. The driver's flush
(once per event-loop turn) and the node's timer are scheduled by
server/schedule.py; the check of idle clients (once a second at most; which
clients are idle is the Node's ``idle_clients``) runs here, on that timer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys
import time

from broker.config import Config
from server import listeners
from server.aof import AOFLoadError, AppendOnlyFile
from server.boot import remove_pidfile
from server.bus import ClusterBus
from server.clock import process_clock
from server.compose import compose_node
from server.host import ServerHost
from server.http import HttpServer
from server.nodes_conf import read_nodes_conf, save_nodes_conf
from server.resp import ClientConnection
from server.schedule import Schedule
from server.seeds import Seeder
from server.tls import build_contexts, tls_wanted

log = logging.getLogger("server")

# uvloop keeps up to this many freed callback handles (call_soon's) for reuse.
HANDLE_FREE_LIST = 250


class ProcessRandom(random.Random):
    """The node's random source in a process, seeded from the OS. Its random
    bytes (the random parts of job ids, drawn 256 ids at a time) come from the
    OS too: one call, rather than a big integer drawn and converted."""

    def randbytes(self, n: int) -> bytes:
        return os.urandom(n)


class Server:
    def __init__(self, config: Config, argv: list[str]) -> None:
        self.config = config
        self.argv = argv
        self.loop = asyncio.get_event_loop()
        self.host = ServerHost(self)
        self.aof: AppendOnlyFile | None = None
        # The wall clock read once, then the monotonic clock's (server/clock.py):
        # a stepped system clock neither expires nor stalls jobs.
        self.clock = process_clock()
        # The driver's flush once per turn and the node's timer (compiled).
        self.schedule = Schedule(self.loop, self.clock, self.on_timer)
        self.node, self.cluster, self.driver = compose_node(
            config, clock=self.clock, rng=ProcessRandom(int.from_bytes(os.urandom(16), "big")),
            host=self.host, saved_nodes_conf=read_nodes_conf(config),
            perf_ns=time.perf_counter_ns,
            wake=self.schedule.wake_flush, arm_timer=self.schedule.arm_timer,
            save_nodes_conf=lambda text: save_nodes_conf(self.config, text))
        self.schedule.driver = self.driver
        self.bus = None
        self.listeners = []
        self.http = None            # the HTTP shell (ext), when http-port is set
        # TLS (server/tls.py): the contexts, the client TLS listeners (one
        # server per socket, re-served when the contexts change, in order).
        self.tls = build_contexts(config) if tls_wanted(config) else None
        self.tls_listeners: list = []
        self.tls_port_open = 0
        self.tls_port_changes = 0
        self.tls_relisten = asyncio.Lock()   # see server/reconfigure.py serve_tls
        self.seeder = Seeder(self)
        self.stopped = asyncio.Event()
        self.shutdown_mode = None
        self.exit_code = 0
        self.load_task = None
        self.idle_check_at = 0      # next check of the `timeout` directive, ms

    # -- event plumbing (the flush and the timer: server/schedule.py) ------
    def flush(self) -> None:
        self.schedule.flush()

    def on_timer(self) -> None:
        if self.config.timeout:
            self.close_idle_clients()
        self.driver.tick()

    def close_idle_clients(self) -> None:
        """The `timeout` directive, checked once a second at most."""
        now = self.clock()
        if now < self.idle_check_at:
            return
        self.idle_check_at = now + 1000
        for client in self.node.idle_clients(now):
            if client.conn is not None:
                log.debug("Closing idle client %s", client.addr)
                client.conn.close()

    def prime_handle_free_list(self) -> None:
        """Fill uvloop's free list of callback handles at start-up, before any
        job: otherwise the handles it keeps are ones made during a burst of
        jobs, and each (one object) kept a 1 MiB allocator arena resident after
        the jobs around it were gone (7 MB after a million jobs). Handles are
        then reused from the list, not made among the jobs."""
        handles = [self.loop.call_soon(_nothing) for _ in range(HANDLE_FREE_LIST)]
        for handle in handles:
            handle.cancel()     # dropped by the loop's next turn, into the list

    # -- cluster bus (its messages: Schedule.on_bus_message) -----------------
    def on_link_up(self, node_id: str) -> None:
        self.driver.link_up(node_id, self.clock())

    def on_link_down(self, node_id: str) -> None:
        self.driver.link_down(node_id, self.clock())

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        bus_tls = self.tls if cfg.tls_cluster else None
        self.bus = ClusterBus(self.schedule.on_bus_message, host=cfg.bind or ["127.0.0.1"],
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
        # The plaintext port opens last: a PING answered there means every
        # other port is open too (starting each one yields to the loop).
        for addr in (cfg.bind or ["127.0.0.1"]) if cfg.port else ():    # port 0: no plaintext
            srv = await self.loop.create_server(
                lambda: ClientConnection(self), host=addr, port=cfg.port,
                backlog=cfg.tcp_backlog, reuse_address=True)
            self.listeners.append(srv)
        if cfg.port:
            log.info("Ready to accept connections on port %d", cfg.port)
        if cfg.tls_port:
            log.info("Ready to accept TLS connections on port %d", cfg.tls_port)
        self.seeder.start()
        self.prime_handle_free_list()
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
        self.schedule.cancel_timer()
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
        os.execv(sys.executable, [sys.executable, "-m", "server", *self.argv])

    # -- persistence -------------------------------------------------------
    def attach_aof(self, aof: AppendOnlyFile | None) -> None:
        self.aof = aof
        self.driver.set_aof(aof)

    async def load_aof(self) -> None:
        aof = AppendOnlyFile.in_process(self.node, self.config, self.loop)
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


def _nothing() -> None:
    pass
