"""``python -m chaos.proxy [--host 127.0.0.1] [--port 8474] [--config FILE] [--seed N]``

Runs the fault proxy's API until SIGINT/SIGTERM.  ``--config`` creates proxies
at start from a JSON list, as ``toxiproxy-server -config`` does; ``--port 0``
picks a free port.  Once listening it prints one line:
``chaos.proxy: API on http://HOST:PORT (Toxiproxy API VERSION)``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from chaos.proxy.api import VERSION, FaultProxyServer
from chaos.proxy.errors import ApiError

log = logging.getLogger("chaos.proxy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos.proxy", description=__doc__.split("\n\n")[1])
    parser.add_argument("--host", default="127.0.0.1", help="address the API listens on")
    parser.add_argument("--port", type=int, default=8474, help="API port (0: any free port)")
    parser.add_argument("--config", help="JSON file of proxies to create at start")
    parser.add_argument("--seed", type=int, help="seed for toxicity and jitter draws")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"chaos.proxy {VERSION}")
    return parser.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    server = FaultProxyServer(seed=args.seed)
    if args.config:
        try:
            proxies, error = await server.collection.populate_json(Path(args.config).read_bytes())
        except (OSError, ApiError) as exc:
            error, proxies = exc, []
        if error:
            log.error("populating from %s: %s", args.config, error)
        else:
            log.info("populated %d proxies from %s", len(proxies), args.config)
    try:
        port = await server.start(args.host, args.port)
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", args.host, args.port, exc)
        await server.collection.close()
        return 1
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"chaos.proxy: API on http://{host}:{port} (Toxiproxy API {VERSION})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
