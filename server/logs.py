"""The process's log: Redis' line format and loglevel names."""

from __future__ import annotations

import logging
import sys
import time

from broker.config import Config

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


def set_loglevel(config: Config) -> None:
    """CONFIG SET loglevel."""
    logging.getLogger().setLevel(LOGLEVELS[config.loglevel])
