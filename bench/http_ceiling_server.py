#!/usr/bin/env python3
"""The HTTP ceiling: an aiohttp server that adds no job, on the same event loop
and with the same aiohttp set-up as the node's HTTP port, so bench_http.py can
show how far one POST per job is from what aiohttp serves at all here.

    python bench/http_ceiling_server.py PORT

``POST /queues/{queue}/jobs`` reads the JSON body, and answers 201 with the
document the node sends (``{"id": "<a job id>"}``, a constant). What is left:
the loop, the socket, aiohttp's parsing, routing, request and response
objects, and the JSON both ways.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

REPLY = json.dumps({"id": "D-" + "0" * 8 + "-" + "A" * 24 + "-05a1"}).encode()


async def add_jobs(request: web.Request) -> web.Response:
    doc = json.loads(await request.read())
    if not isinstance(doc, (dict, list)):
        raise web.HTTPBadRequest()
    return web.Response(body=REPLY, status=201, content_type="application/json")


async def serve(port: int) -> None:
    app = web.Application()
    app.add_routes([web.post("/queues/{queue}/jobs", add_jobs)])
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    await asyncio.Event().wait()


def main() -> None:
    try:
        import uvloop  # optional: not on Windows
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    asyncio.run(serve(int(sys.argv[1])))


if __name__ == "__main__":
    main()
