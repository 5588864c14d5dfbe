"""Listening sockets that can change TLS context while they run.

asyncio fixes a server's SSLContext when it starts serving, so new
certificates (CONFIG SET tls-cert-file ...) mean serving the same listening
sockets again with the new context: :func:`reserve` keeps a duplicate of each
listening socket, closes the old server and serves the duplicate, so the port
never stops listening (connections arriving meanwhile wait in the kernel's
backlog) and established connections are not touched. A new port is bound
first (:func:`bind`, synchronous, so a port in use refuses the CONFIG SET),
then served (:func:`serve`).
"""

from __future__ import annotations

import asyncio
import os
import socket

__all__ = ["bind", "serve", "reserve", "close"]


def bind(hosts: list[str], port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets on ``port`` for every address of every host; OSError if
    one cannot be bound (those already bound are closed)."""
    socks: list[socket.socket] = []
    try:
        for host in hosts:
            for family, type_, proto, _, addr in socket.getaddrinfo(
                    host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE):
                sock = socket.socket(family, type_, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
                sock.listen(backlog)
                sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


async def serve(factory, socks: list[socket.socket], ssl_ctx=None) -> list:
    """An asyncio server per socket (``ssl_ctx``: TLS from the first byte)."""
    loop = asyncio.get_running_loop()
    return [await loop.create_server(factory, sock=sock, ssl=ssl_ctx) for sock in socks]


async def reserve(servers: list, factory, ssl_ctx=None) -> list:
    """Serve the sockets of ``servers`` again, with ``ssl_ctx``; closes ``servers``."""
    socks = [socket.socket(fileno=os.dup(s.fileno())) for srv in servers for s in srv.sockets]
    close(servers)
    for sock in socks:
        sock.setblocking(False)
    return await serve(factory, socks, ssl_ctx)


def close(servers: list) -> None:
    for srv in servers:
        srv.close()
