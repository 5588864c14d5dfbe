# compiled: mypyc (setup.py builds each module whose first line this is)
"""Command arguments read as Disque reads them: integers (strtoll), timeouts,
job ids; a bad one raises CommandError with Disque's text."""

from __future__ import annotations

import re
from typing import Final

from mypy_extensions import i64

from broker.dispatch import CommandError
from broker.job import BADID, valid_job_id
from broker.node import Node

SYNTAX_ERROR = "ERR syntax error"


# Disque reads integers with strtoll/strtoul: an optional sign and decimal
# digits, nothing else ("+5" and "05" are 5, "" is 0); they stop at a NUL byte.
_C_INTEGER = re.compile(rb"(?:[+-]?[0-9]+)?\Z")


def _digits(arg: bytes) -> i64:
    """The value of 1 to 18 ASCII digits (most arguments: counts, times), else
    -1: read as C integers, with no int() of the bytes and no bound to check."""
    n = len(arg)
    if n == 0 or n > 18:
        return -1
    v: i64 = 0
    for i in range(n):
        c = arg[i]
        if c < 48 or c > 57:
            return -1
        v = v * 10 + (c - 48)
    return v


def c_integer(arg: bytes) -> int | None:
    """The value strtoll/strtoul give an argument Disque accepts, else None."""
    d = _digits(arg)
    if d >= 0:
        return d
    return _other_integer(arg)


def _other_integer(arg: bytes) -> int | None:
    """c_integer of what _digits does not read (a sign, a NUL, 19 digits and more)."""
    if arg.isdigit():               # plain ASCII digits: no regex
        return int(arg)
    if b"\0" in arg:
        arg = arg[:arg.index(b"\0")]
    if not _C_INTEGER.match(arg):
        return None
    return int(arg) if arg else 0


def parse_int(arg: bytes, message: str = "ERR value is not an integer or out of range") -> int:
    """An integer argument as Disque reads it (getLongLongFromObject)."""
    d = _digits(arg)
    if d >= 0:
        return d        # 18 digits at most: no bound to check
    n = _other_integer(arg)
    if n is None or not -(1 << 63) <= n < (1 << 63):
        raise CommandError(message)
    return n


# Disque keeps a job's TTL, DELAY and RETRY in 32-bit fields. Larger values are
# taken as the largest such field (136 years), so that every time computed from
# them (now + ttl * 1000...) fits a C int64 in both builds.
MAX_SECONDS: Final = (1 << 32) - 1
MAX_TIMEOUT_MS: Final = MAX_SECONDS * 1000


def parse_timeout_ms(arg: bytes) -> int:
    """A command timeout in milliseconds (at most MAX_TIMEOUT_MS)."""
    n = parse_int(arg, "ERR timeout is not an integer or out of range")
    if n < 0:
        raise CommandError("ERR timeout is negative")
    return min(n, MAX_TIMEOUT_MS)


def parse_job_ids(node: Node, argv: list, start: int = 1) -> list:
    """All ids are validated before anything runs (SPEC section 2)."""
    ids = argv[start:]
    for jid in ids:
        if not valid_job_id(jid):
            raise CommandError(BADID)
    return ids
