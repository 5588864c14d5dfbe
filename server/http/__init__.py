"""The HTTP shell (ext): an aiohttp server on the node's event loop, over the
same Node and output driver as the RESP shell.

    GET  /                the dashboard (static files in server/http/static/)
    GET  /openapi.json    the API's OpenAPI 3 document
    GET  /metrics         Prometheus exposition (server/http/metrics.py)
    the REST API          server/http/api.py

``HttpServer(node, driver, aof=...)`` then ``await start(hosts, port)``;
``await stop()``. server/process.py starts it when ``http-port`` is not 0.
"""

from __future__ import annotations

import logging
from pathlib import Path

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from server.http.api import Api, dumps, error_response
from server.http.metrics import registry_for
from server.http.openapi import document
from server.http.replies import HttpError

log = logging.getLogger("server.http")

STATIC = Path(__file__).resolve().parent / "static"
SHUTDOWN_TIMEOUT = 1.0      # seconds requests in progress get at shutdown
ERROR_CODES = {404: "NOTFOUND", 405: "METHOD", 413: "TOOLARGE"}


@web.middleware
async def json_errors(request: web.Request, handler):
    """aiohttp's own refusals (no such route, wrong method, a malformed
    request) as JSON error documents, like the API's."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return error_response(HttpError(e.status, ERROR_CODES.get(e.status, "BADREQUEST"),
                                        e.reason if e.text is None else e.text))


class HttpServer:
    def __init__(self, node, driver, aof=lambda: None) -> None:
        self.node = node
        self.driver = driver
        self.api = Api(node, driver)
        self.registry = registry_for(node, aof)
        self.openapi = dumps(document())
        self.runner: web.AppRunner | None = None
        self.sites: list = []

    def app(self) -> web.Application:
        # Request bodies are limited by proto-max-bulk-len, read at each request
        # (it may change at run time): aiohttp's own cap is off.
        app = web.Application(middlewares=[json_errors], client_max_size=1 << 62)
        app.add_routes(self.api.routes())
        app.add_routes([
            web.get("/metrics", self.metrics, allow_head=False),
            web.get("/openapi.json", self.openapi_json, allow_head=False),
            web.get("/", self.index),
            web.static("/static", STATIC),
        ])
        return app

    async def start(self, hosts: list[str], port: int, backlog: int = 511) -> None:
        self.runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None,
                                    shutdown_timeout=SHUTDOWN_TIMEOUT)
        await self.runner.setup()
        for host in hosts:
            site = web.TCPSite(self.runner, host, port, backlog=backlog, reuse_address=True)
            await site.start()
            self.sites.append(site)
        log.info("HTTP API, /metrics and dashboard on port %d", port)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # -------------------------------------------------------- non-API routes
    async def metrics(self, request: web.Request) -> web.Response:
        if self.node.config.requirepass:       # the same Bearer password as the API
            try:
                session = await self.api.open_session(request)
            except HttpError as e:
                return error_response(e)
            authenticated = bool(session.conns) and session.conns[0].client.authenticated
            session.close()
            if not authenticated:
                return error_response(HttpError(401, "NOAUTH",
                                                "NOAUTH Authentication required."))
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi_json(self, request: web.Request) -> web.Response:
        return web.Response(body=self.openapi, content_type="application/json")

    async def index(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

