"""Toxiproxy's HTTP API (``api.go``) on aiohttp: the same routes, JSON shapes,
status codes and error bodies, so toxiproxy-python and other Toxiproxy
clients drive this server unchanged."""

from __future__ import annotations

import logging

from aiohttp import web

from chaos.proxy import errors
from chaos.proxy.gojson import dumps
from chaos.proxy.proxy import Proxy, ProxyCollection

log = logging.getLogger(__name__)

# The Toxiproxy release whose API this server follows.
TOXIPROXY_VERSION = "2.12.0"
VERSION = f"{TOXIPROXY_VERSION}-disquette"
COLLECTION = web.AppKey("collection", ProxyCollection)
JSON = "application/json"


def json_response(value: object, status: int = 200) -> web.Response:
    return web.Response(body=dumps(value), status=status, headers={"Content-Type": JSON})


def go_error(text: str, status: int) -> web.Response:
    """Go's http.Error: the text plus a newline, as text/plain."""
    return web.Response(body=(text + "\n").encode(), status=status,
                        headers={"Content-Type": "text/plain; charset=utf-8",
                                 "X-Content-Type-Options": "nosniff"})


def api_error(exc: errors.ApiError) -> web.Response:
    return go_error(dumps(exc.to_json()).decode(), exc.status)


def no_content() -> web.Response:
    return web.Response(status=204)


@web.middleware
async def go_like(request: web.Request, handler) -> web.StreamResponse:
    """Toxiproxy refuses browsers (a page could otherwise drive it through
    the user's browser) and answers unknown routes as gorilla/mux does."""
    if request.headers.get("User-Agent", "").startswith("Mozilla/"):
        return go_error("User agent not allowed", 403)
    try:
        return await handler(request)
    except errors.ApiError as exc:
        return api_error(exc)
    except web.HTTPMethodNotAllowed:
        return web.Response(status=405)
    except web.HTTPNotFound:
        return go_error("404 page not found", 404)


def _collection(request: web.Request) -> ProxyCollection:
    return request.app[COLLECTION]


def _proxy(request: web.Request) -> Proxy:
    return _collection(request).get(request.match_info["proxy"])


async def proxy_index(request: web.Request) -> web.Response:
    proxies = _collection(request).proxies
    return json_response({name: proxies[name].to_json() for name in sorted(proxies)})


async def proxy_create(request: web.Request) -> web.Response:
    proxy = await _collection(request).create_json(await request.read())
    return json_response(proxy.to_json(), 201)


async def populate(request: web.Request) -> web.Response:
    try:
        proxies, error = await _collection(request).populate_json(await request.read())
    except errors.ApiError as exc:          # bad input: answered in the same JSON shape
        proxies, error = [], exc
    body: dict = error.to_json() if error else {}
    # Go marshals an empty slice built by append as null.
    body["proxies"] = [p.to_json() for p in proxies] or None
    return json_response(body, error.status if error else 201)


async def proxy_show(request: web.Request) -> web.Response:
    return json_response(_proxy(request).to_json())


async def proxy_update(request: web.Request) -> web.Response:
    proxy = await _collection(request).update_json(request.match_info["proxy"],
                                                   await request.read())
    return json_response(proxy.to_json())


async def proxy_delete(request: web.Request) -> web.Response:
    await _collection(request).remove(request.match_info["proxy"])
    return no_content()


async def toxic_index(request: web.Request) -> web.Response:
    return json_response([t.to_json() for t in _proxy(request).toxics.all()])


async def toxic_create(request: web.Request) -> web.Response:
    spec = await _proxy(request).toxics.add_json(await request.read())
    return json_response(spec.to_json())          # 200, not 201, as Toxiproxy


def _toxic(request: web.Request):
    spec = _proxy(request).toxics.find(request.match_info["toxic"])
    if spec is None:
        raise errors.TOXIC_NOT_FOUND
    return spec


async def toxic_show(request: web.Request) -> web.Response:
    return json_response(_toxic(request).to_json())


async def toxic_update(request: web.Request) -> web.Response:
    spec = await _proxy(request).toxics.update_json(request.match_info["toxic"],
                                                    await request.read())
    return json_response(spec.to_json())


async def toxic_delete(request: web.Request) -> web.Response:
    await _proxy(request).toxics.remove(request.match_info["toxic"])
    return no_content()


async def reset(request: web.Request) -> web.Response:
    await _collection(request).reset()
    return no_content()


async def version(request: web.Request) -> web.Response:
    return web.Response(body=f'{{"version": "{VERSION}"}}\n'.encode(),
                        headers={"Content-Type": "application/json;charset=utf-8"})


def make_app(collection: ProxyCollection) -> web.Application:
    app = web.Application(middlewares=[go_like])
    app[COLLECTION] = collection
    routes = [("POST", "/reset", reset),
              ("GET", "/proxies", proxy_index), ("POST", "/proxies", proxy_create),
              ("POST", "/populate", populate),
              ("GET", "/proxies/{proxy}", proxy_show),
              ("POST", "/proxies/{proxy}", proxy_update),      # POST is deprecated for PATCH
              ("PATCH", "/proxies/{proxy}", proxy_update),
              ("DELETE", "/proxies/{proxy}", proxy_delete),
              ("GET", "/proxies/{proxy}/toxics", toxic_index),
              ("POST", "/proxies/{proxy}/toxics", toxic_create),
              ("GET", "/proxies/{proxy}/toxics/{toxic}", toxic_show),
              ("POST", "/proxies/{proxy}/toxics/{toxic}", toxic_update),
              ("PATCH", "/proxies/{proxy}/toxics/{toxic}", toxic_update),
              ("DELETE", "/proxies/{proxy}/toxics/{toxic}", toxic_delete),
              ("GET", "/version", version)]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)

    async def close_proxies(app: web.Application) -> None:
        await app[COLLECTION].close()
    app.on_shutdown.append(close_proxies)
    return app


class FaultProxyServer:
    """The API server and its proxies, in the running event loop.

    ``port = await server.start(host, port)`` (port 0 picks one), then
    ``await server.close()``: every proxy stops and its connections drop."""

    def __init__(self, seed: int | None = None) -> None:
        self.collection = ProxyCollection(seed)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 8474) -> int:
        self._runner = web.AppRunner(make_app(self.collection), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        return self._runner.addresses[0][1]          # the bound port, for port 0

    async def close(self) -> None:
        if self._runner:
            await self._runner.cleanup()
            self._runner = None
