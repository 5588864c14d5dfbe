# compiled: mypyc (setup.py builds each module whose first line this is)
"""The command table: ``@command`` registers a handler in ``COMMANDS`` when its
family module is imported; ``renamed`` applies ``rename-command`` to a copy.

The families import this module (and broker/commands/args.py), never the
package, so the package's ``__init__`` can import every family without a cycle.
"""

from __future__ import annotations

from broker.dispatch import Command

COMMANDS: dict[bytes, Command] = {}


def command(name: str, arity: int, flags: int = 0, *, doc: str):
    """Register a handler; ``doc``'s first line is the syntax (COMMAND DOCS).
    Not the handler's docstring: mypyc keeps none of the functions it
    compiles (setup.py)."""
    def register(fn):
        cmd = Command(name.encode(), fn, arity, flags, doc.strip())
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
