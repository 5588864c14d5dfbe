"""Client commands: one module per family, each a set of ``@command`` handlers.

A handler is ``fn(node, client, argv) -> reply``: it parses its arguments, asks
the Node (broker/lifecycle.py for job state changes, node.cluster for the
cluster) to act, and returns the reply value (see protocol/resp.py for the
types). Parse failures raise CommandError, which the Node turns into the reply.

``COMMANDS`` is the table the composition root (server/) gives the Node; importing
this package registers every family (the imports at the end).
"""

from __future__ import annotations

import re

from broker.dispatch import (  # noqa: F401  (the command modules import them from here)
    F_ADMIN, F_DENYOOM, F_FAST, F_LOADING, F_NOAUTH, F_WRITE, FLAG_NAMES, Command,
    CommandError,
)
from broker.job import BADID, valid_job_id

COMMANDS: dict[bytes, Command] = {}


def command(name: str, arity: int, flags: int = 0):
    """Register a handler; its docstring's first line is the syntax (COMMAND DOCS)."""
    def register(fn):
        cmd = Command(name.encode(), fn, arity, flags, (fn.__doc__ or "").strip())
        COMMANDS[cmd.name] = cmd
        return fn
    return register


def renamed(table: dict[bytes, Command], renames) -> dict[bytes, Command]:
    """A copy of the command table with the ``rename-command old new`` edits
    applied in order (new "" removes the command), as Redis applies them;
    ValueError(Redis' text, the line) for a line the table refuses."""
    table = dict(table)
    for r in renames:
        cmd = table.pop(r.old.lower().encode("utf-8", "surrogateescape"), None)
        if cmd is None:
            raise ValueError("No such command in rename-command", r)
        if r.new:
            new = r.new.lower().encode("utf-8", "surrogateescape")
            if new in table:
                raise ValueError("Target command name already exists", r)
            table[new] = cmd
    return table


SYNTAX_ERROR = "ERR syntax error"


# Disque reads integers with strtoll/strtoul: an optional sign and decimal
# digits, nothing else ("+5" and "05" are 5, "" is 0); they stop at a NUL byte.
_C_INTEGER = re.compile(rb"(?:[+-]?[0-9]+)?\Z")


def c_integer(arg: bytes) -> int | None:
    """The value strtoll/strtoul give an argument Disque accepts, else None."""
    if arg.isdigit():               # plain ASCII digits: most arguments, no regex
        return int(arg)
    if b"\0" in arg:
        arg = arg[:arg.index(b"\0")]
    if not _C_INTEGER.match(arg):
        return None
    return int(arg) if arg else 0


def parse_int(arg: bytes, message: str = "ERR value is not an integer or out of range") -> int:
    """An integer argument as Disque reads it (getLongLongFromObject)."""
    n = c_integer(arg)
    if n is None or not -(1 << 63) <= n < (1 << 63):
        raise CommandError(message)
    return n


def parse_timeout_ms(arg: bytes) -> int:
    n = parse_int(arg, "ERR timeout is not an integer or out of range")
    if n < 0:
        raise CommandError("ERR timeout is negative")
    return n


def parse_job_ids(node, argv: list, start: int = 1) -> list:
    """All ids are validated before anything runs (SPEC section 2)."""
    ids = argv[start:]
    for jid in ids:
        if not valid_job_id(jid):
            raise CommandError(BADID)
    return ids



# Every family registers its commands in COMMANDS when imported.
from broker.commands import (  # noqa: E402,F401
    cluster, connection, getjob, jobs, queues, scan, server, states,
)
