# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the Node needs to know of a client command to run it: its table entry
(``Command``: name, handler, arity, flags), the flags, the parse error a handler
raises (``CommandError``) and the dispatch errors. The commands themselves live in
broker/commands/ (a layer above the cluster) and reach the Node as a table given
to its constructor, so the core imports none of them.
"""

from __future__ import annotations

from typing import Any, Callable, Final

from itertools import count

from protocol.resp import Error

# Command flags.
F_NOAUTH: Final = 1      # allowed before AUTH
F_LOADING: Final = 2     # allowed while the AOF is loading
F_DENYOOM: Final = 4     # refused when over maxmemory (it would grow memory)
F_WRITE: Final = 8
F_FAST: Final = 16
F_ADMIN: Final = 32

FLAG_NAMES = {F_NOAUTH: b"no_auth", F_LOADING: b"loading", F_DENYOOM: b"denyoom",
              F_WRITE: b"write", F_FAST: b"fast", F_ADMIN: b"admin"}


# Each Command's index in a node's per-command counters (Node.command_stats).
_SLOTS: Final = count()


class Command:
    __slots__ = ("name", "handler", "arity", "flags", "doc", "slot")

    def __init__(self, name: bytes, handler: Callable[..., Any], arity: int, flags: int,
                 doc: str) -> None:
        self.name = name
        # fn(node, client, argv) -> reply (or BLOCKED); typed, so that the compiled
        # dispatch calls it directly, with no attribute lookup by name.
        self.handler: Callable[..., Any] = handler
        self.arity = arity      # Redis convention: N exact, -N at least N (name included)
        self.flags = flags
        self.doc = doc
        self.slot: int = next(_SLOTS)


class CommandError(Exception):
    """The client's request is wrong: raised by argument parsing (and by the
    host's effects, e.g. BGREWRITEAOF already running); carries the error reply."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reply = Error(message)


def dispatch_error(cmd: Command | None, argv: list) -> Error:
    """The reply for an unknown command or a wrong number of arguments."""
    name = bytes(argv[0]).decode("utf-8", "replace")
    if cmd is None:
        return Error(f"ERR unknown command '{name}'")
    return Error(f"ERR wrong number of arguments for '{name.lower()}' command")
