"""Client commands: one module per family, each a set of ``@command`` handlers.

A handler is ``fn(node, client, argv) -> reply``: it parses its arguments, asks
the Node to act, and returns the reply value (see protocol/resp.py for the
types). Parse failures raise CommandError, which the Node turns into the reply.
"""

from __future__ import annotations

import re

from protocol.resp import Error

# Command flags.
F_NOAUTH = 1      # allowed before AUTH
F_LOADING = 2     # allowed while the AOF is loading
F_DENYOOM = 4     # refused when over maxmemory (it would grow memory)
F_WRITE = 8
F_FAST = 16
F_ADMIN = 32

FLAG_NAMES = {F_NOAUTH: b"no_auth", F_LOADING: b"loading", F_DENYOOM: b"denyoom",
              F_WRITE: b"write", F_FAST: b"fast", F_ADMIN: b"admin"}


class Command:
    __slots__ = ("name", "handler", "arity", "flags", "doc")

    def __init__(self, name: bytes, handler, arity: int, flags: int, doc: str) -> None:
        self.name = name
        self.handler = handler
        self.arity = arity      # Redis convention: N exact, -N at least N (name included)
        self.flags = flags
        self.doc = doc


COMMANDS: dict[bytes, Command] = {}
# The same commands under their lower- and upper-case names, as clients send
# them: the hot path finds "ADDJOB" with one dict hit, without a lower() first.
COMMANDS_ANYCASE: dict[bytes, Command] = {}


def command(name: str, arity: int, flags: int = 0):
    """Register a handler; its docstring's first line is the syntax (COMMAND DOCS)."""
    def register(fn):
        cmd = Command(name.encode(), fn, arity, flags, (fn.__doc__ or "").strip())
        COMMANDS[cmd.name] = cmd
        COMMANDS_ANYCASE[cmd.name] = COMMANDS_ANYCASE[cmd.name.upper()] = cmd
        return fn
    return register


class CommandError(Exception):
    """Raised by argument parsing; carries the error reply."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reply = Error(message)


SYNTAX_ERROR = "ERR syntax error"


def dispatch_error(cmd: Command | None, argv: list) -> Error:
    """The reply for an unknown command or a wrong number of arguments."""
    name = bytes(argv[0]).decode("utf-8", "replace")
    if cmd is None:
        return Error(f"ERR unknown command '{name}'")
    return Error(f"ERR wrong number of arguments for '{name.lower()}' command")


# Disque reads integers with strtoll/strtoul: an optional sign and decimal
# digits, nothing else ("+5" and "05" are 5, "" is 0); they stop at a NUL byte.
_C_INTEGER = re.compile(rb"(?:[+-]?[0-9]+)?\Z")


def c_integer(arg: bytes) -> int | None:
    """The value strtoll/strtoul give an argument Disque accepts, else None."""
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
    from broker.job import BADID, valid_job_id
    ids = argv[start:]
    for jid in ids:
        if not valid_job_id(jid):
            raise CommandError(BADID)
    return ids

