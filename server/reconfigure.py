"""What the process changes at run time when a directive changes (CONFIG SET),
on the running Server (server/process.py): the AOF turned on or off, the
working directory, the log level, the clients' output limits, TLS contexts and
the TLS port, the bus routes and secrets. Raising ConfigError refuses the
change (the config puts the old value back)."""

from __future__ import annotations

import logging
import os

from broker.config import ConfigError
from broker.dispatch import CommandError
from server import listeners
from server.aof import AppendOnlyFile
from server.logs import set_loglevel
from server.resp import ClientConnection
from server.tls import TLSConfigError, build_contexts, tls_wanted

log = logging.getLogger("server")


def config_changed(server, name: str) -> None:
    config = server.config
    node = server.node
    if name == "appendonly":
        if config.appendonly and server.aof is None:
            aof = AppendOnlyFile.in_process(node, config, server.loop)
            try:
                aof.enable_at_runtime()
            except CommandError:
                aof.stop()
                raise ConfigError("Unable to turn on AOF. Check server logs.") from None
            server.attach_aof(aof)
        elif not config.appendonly and server.aof is not None:
            if node.loading:
                raise ConfigError("Can't turn off the AOF while it is loading")
            server.flush()
            server.aof.stop()
            server.attach_aof(None)
    elif name == "dir":
        # chdir at once (as Redis); refused if that fails.
        try:
            os.chdir(config.dir)
        except OSError as e:
            raise ConfigError(f"CONFIG SET failed (possibly related to argument "
                              f"'dir') - {e.strerror}") from None
    elif name == "aof-history":
        node.persist_history = server.aof is not None and config.aof_history
    elif name == "appendfsync" and server.aof is not None:
        server.aof.flush(fsync=True)
    elif name == "loglevel":
        set_loglevel(config)
    elif name == "client-output-buffer-limit":
        for client in list(node.clients.values()):
            if client.conn is not None and not client.conn.closed:
                client.conn.apply_output_limits()
    elif name.startswith("tls-"):
        reconfigure_tls(server, name)
    elif name == "cluster-bus-route" and server.bus is not None:
        server.bus.set_routes(config.cluster_bus_route)
    elif name.startswith("cluster-auth-pass") and server.bus is not None:
        tls = server.tls if config.tls_cluster else None
        server.bus.configure(tls and tls.bus_server, tls and tls.bus_client,
                             config.cluster_secrets())


def reconfigure_tls(server, name: str) -> None:
    """A tls-* directive changed: new contexts (refused, as Redis does, if they
    cannot be built), then the client TLS listeners and the bus take them;
    established connections are kept."""
    cfg = server.config
    try:
        tls = build_contexts(cfg) if tls_wanted(cfg) else None
    except TLSConfigError as e:
        log.warning("%s", e)
        raise ConfigError(f"CONFIG SET failed (possibly related to argument '{name}') - "
                          f"Unable to update TLS configuration. Check server logs. "
                          f"({e})") from None
    socks = []
    if cfg.tls_port != server.tls_port_open:
        try:
            socks = listeners.bind(cfg.bind or ["127.0.0.1"], cfg.tls_port,
                                   cfg.tcp_backlog) if cfg.tls_port else []
        except OSError as e:
            log.warning("Could not listen on TLS port %d: %s", cfg.tls_port, e)
            raise ConfigError(f"CONFIG SET failed (possibly related to argument "
                              f"'{name}') - Unable to listen on this port. Check "
                              f"server logs. ({e.strerror or e})") from None
        listeners.close(server.tls_listeners)      # the old port stops now
        server.tls_listeners = []
        server.tls_port_open = cfg.tls_port
        server.tls_port_changes += 1
    server.tls = tls
    if socks or (server.tls_listeners and tls is not None):
        server.loop.create_task(serve_tls(server, socks, tls.clients, server.tls_port_changes))
    if server.bus is not None:
        bus_tls = tls if cfg.tls_cluster else None
        server.bus.configure(bus_tls and bus_tls.bus_server, bus_tls and bus_tls.bus_client,
                             cfg.cluster_secrets())


async def serve_tls(server, socks, ctx, port_changes: int) -> None:
    """Serve the sockets of a new tls-port, or (``socks`` empty) the current
    ones with a new context; in the order the changes came, unless the port
    changed again since."""
    async with server.tls_relisten:
        if port_changes != server.tls_port_changes:
            for sock in socks:
                sock.close()
        elif socks:
            server.tls_listeners = await listeners.serve(
                lambda: ClientConnection(server), socks, ctx)
        elif server.tls_listeners:
            server.tls_listeners = await listeners.reserve(
                server.tls_listeners, lambda: ClientConnection(server), ctx)
