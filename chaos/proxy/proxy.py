"""Proxies and the proxy collection (``proxy.go``, ``proxy_collection.go``).

A proxy listens on ``listen`` and joins each client to a new connection to
``upstream`` through its toxics.  Disabling it closes the listener (new
connections are refused) and drops every open connection.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from typing import Any

from chaos.proxy import errors
from chaos.proxy.gojson import BOOL, STRING, value_type_error
from chaos.proxy.link import Connection
from chaos.proxy.toxic_collection import ToxicCollection

log = logging.getLogger(__name__)

PROXY_FIELDS = {"name": STRING, "listen": STRING, "upstream": STRING, "enabled": BOOL}


# -- addresses, as Go's net.SplitHostPort / ResolveTCPAddr / TCPAddr.String ----

def split_host_port(address: str) -> tuple[str, str]:
    def fail(why: str) -> errors.ApiError:
        return errors.internal(f"listen tcp: address {address}: {why}")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise fail("missing ']' in address")
        if address[end + 1:end + 2] != ":":
            raise fail("missing port in address")
        return address[1:end], address[end + 2:]
    if ":" not in address:
        raise fail("missing port in address")
    host, port = address.rsplit(":", 1)
    if ":" in host:
        raise fail("too many colons in address")
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def resolve(address: str) -> tuple[int, str, int]:
    """(family, ip, port) for ``address``; ip "" means every interface."""
    host, port_text = split_host_port(address)
    if port_text and not port_text.isdigit() or int(port_text or 0) > 65535:
        raise errors.internal(f"listen tcp: lookup tcp/{port_text}: unknown port")
    port = int(port_text or 0)
    if not host:
        return socket.AF_INET6 if socket.has_ipv6 else socket.AF_INET, "", port
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise errors.internal(f"listen tcp: lookup {host}: no such host") from None
    infos.sort(key=lambda info: info[0] != socket.AF_INET)   # Go prefers IPv4
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr[0], port


async def resolved_string(address: str) -> str:
    family, ip, port = await resolve(address)
    return format_address(ip, port)


async def bind_listener(address: str) -> socket.socket:
    family, ip, port = await resolve(address)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as Go's listeners
        if not ip and family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((ip or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
        sock.listen(socket.SOMAXCONN)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise errors.internal(f"listen tcp {format_address(ip, port)}: bind: {reason}") from None
    return sock


class Proxy:
    def __init__(self, name: str, listen: str, upstream: str, rng: random.Random) -> None:
        self.name, self.listen, self.upstream = name, listen, upstream
        self.enabled = False
        self.rng = rng
        self.connections: set[Connection] = set()
        self.toxics = ToxicCollection(self.connections)
        self.lock = asyncio.Lock()
        self._server: asyncio.Server | None = None
        self._accepting: set[asyncio.Task] = set()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxics.all()]}

    async def start(self) -> None:
        """Listen (the caller holds ``lock``); the listen address becomes the
        bound one, so ``127.0.0.1:0`` shows the port chosen."""
        if self.enabled:
            raise errors.internal("Proxy already started")
        sock = await bind_listener(self.listen)
        host, port = sock.getsockname()[:2]
        self.listen = format_address("::" if host == "::" else host, port)
        self._server = await asyncio.start_server(self._accept, sock=sock)
        self.enabled = True
        log.info("proxy %s listening on %s -> %s", self.name, self.listen, self.upstream)

    async def stop(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        if self._server:
            self._server.close()
            self._server = None
        for task in list(self._accepting):
            task.cancel()
        for conn in list(self.connections):
            conn.drop()
        log.info("proxy %s stopped", self.name)

    async def differs(self, listen: str, upstream: str) -> bool:
        return await resolved_string(listen) != self.listen or upstream != self.upstream

    async def update(self, listen: str, upstream: str, enabled: bool) -> None:
        async with self.lock:
            if await self.differs(listen, upstream):
                await self.stop()
                self.listen, self.upstream = listen, upstream
            if enabled != self.enabled:
                if enabled:
                    await self.start()
                else:
                    await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._accepting.add(task)
        try:
            host, port = split_host_port(self.upstream)
            upstream = await asyncio.open_connection(host, int(port))
        except (OSError, ValueError, errors.ApiError) as exc:
            log.warning("proxy %s: unable to open connection to upstream %s: %s",
                        self.name, self.upstream, exc)
            writer.close()
            return
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        finally:
            self._accepting.discard(task)
        async with self.toxics.lock:
            if not self.enabled:
                writer.transport.abort()
                upstream[1].transport.abort()
                return
            conn = Connection((reader, writer), upstream, self.toxics.chains_copy(),
                              self.rng, self.connections.discard)
            self.connections.add(conn)
            conn.start()


def _proxy_body(value: Any, defaults: dict[str, Any], go_type: str, struct: str = "Proxy") -> dict:
    return errors.read_struct(value, PROXY_FIELDS, defaults, struct, go_type)


class ProxyCollection:
    def __init__(self, seed: int | None = None) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.rng = random.Random(seed)
        self.lock = asyncio.Lock()

    def get(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise errors.PROXY_NOT_FOUND from None

    def new_proxy(self, name: str, listen: str, upstream: str) -> Proxy:
        return Proxy(name, listen, upstream, self.rng)

    async def create_json(self, data: bytes) -> Proxy:
        fields = _proxy_body(errors.read_json(data),
                             {"name": "", "listen": "", "upstream": "", "enabled": True},
                             "toxiproxy.Proxy")
        if not fields["name"]:
            raise errors.MISSING_FIELD.joined("name")
        if not fields["upstream"]:
            raise errors.MISSING_FIELD.joined("upstream")
        proxy = self.new_proxy(fields["name"], fields["listen"], fields["upstream"])
        await self.add(proxy, fields["enabled"])
        return proxy

    async def add(self, proxy: Proxy, start: bool) -> None:
        async with self.lock:
            if proxy.name in self.proxies:
                raise errors.PROXY_ALREADY_EXISTS
            if start:
                async with proxy.lock:
                    await proxy.start()
            self.proxies[proxy.name] = proxy

    async def add_or_replace(self, proxy: Proxy, start: bool) -> Proxy:
        async with self.lock:
            existing = self.proxies.get(proxy.name)
            if existing:
                if not await existing.differs(proxy.listen, proxy.upstream):
                    return existing
                async with existing.lock:
                    await existing.stop()
            if start:
                async with proxy.lock:
                    await proxy.start()
            self.proxies[proxy.name] = proxy
            return proxy

    async def populate_json(self, data: bytes) -> tuple[list[Proxy], errors.ApiError | None]:
        """Create or replace the listed proxies; a proxy that exists with the
        same listen and upstream is kept as it is, toxics and all."""
        value = errors.read_json(data)
        if value is None:
            value = []
        if not isinstance(value, list):
            error = value_type_error(value, "[]struct { toxiproxy.Proxy; Enabled *bool }")
            raise errors.BAD_REQUEST_BODY.joined(str(error))
        entries = []
        for i, item in enumerate(value):
            fields = _proxy_body(item, {"name": "", "listen": "", "upstream": "", "enabled": True},
                                 "struct { toxiproxy.Proxy; Enabled *bool }", "")
            if not fields["name"]:
                raise errors.MISSING_FIELD.joined(f"name at proxy {i + 1}")
            if not fields["upstream"]:
                raise errors.MISSING_FIELD.joined(f"upstream at proxy {i + 1}")
            entries.append(fields)
        done: list[Proxy] = []
        for fields in entries:
            proxy = self.new_proxy(fields["name"], fields["listen"], fields["upstream"])
            try:
                done.append(await self.add_or_replace(proxy, fields["enabled"]))
            except errors.ApiError as exc:
                return done, exc
        return done, None

    async def update_json(self, name: str, data: bytes) -> Proxy:
        proxy = self.get(name)
        fields = _proxy_body(errors.read_json(data),
                             {"name": proxy.name, "listen": proxy.listen,
                              "upstream": proxy.upstream, "enabled": proxy.enabled},
                             "toxiproxy.Proxy")
        await proxy.update(fields["listen"], fields["upstream"], fields["enabled"])
        return proxy

    async def remove(self, name: str) -> None:
        async with self.lock:
            proxy = self.get(name)
            async with proxy.lock:
                await proxy.stop()
            del self.proxies[name]

    async def reset(self) -> None:
        """POST /reset: every proxy enabled again, every toxic removed."""
        for proxy in list(self.proxies.values()):
            async with proxy.lock:
                if not proxy.enabled:
                    await proxy.start()
            await proxy.toxics.reset()

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            async with proxy.lock:
                await proxy.stop()
