"""``disquette-server`` / ``python -m server``: read the config, set the process
up (daemonize, chdir, log, pidfile, event loop, GC) and run the Server
(server/process.py) until it stops."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from broker.commands.connection import VERSION
from broker.config import Config, ConfigError
from server.boot import daemonize, remove_pidfile, tune_gc, write_pidfile
from server.compose import command_table
from server.logs import setup_logging
from server.process import Server
from server.tls import TLSConfigError

log = logging.getLogger("server")


def read_config_file(path: str) -> str:
    """The text of a config file (or of one it includes), for Config.from_argv."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"Fatal error, can't open config file '{path}': "
                          f"{e.strerror or e}") from None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-v", "--version"):
        print(f"Disquette server v={VERSION} (Disque 1.0-rc1 compatible)")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print("Usage: disquette-server [/path/to/disque.conf] [--directive value ...]\n"
              "       python -m server [/path/to/disque.conf] [--port 7711] ...")
        return 0
    try:
        config = Config.from_argv(argv, os.getcwd(), read_config_file)
        command_table(config)       # a refused rename-command is fatal before anything starts
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
        import uvloop       # optional dependency: the faster event loop when installed
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
