# compiled: mypyc (setup.py builds each module whose first line this is)
"""A client connection as the core sees it: no socket, just state.

The asyncio shell keeps its transport in ``conn``; the core never touches it.
"""

from __future__ import annotations

from itertools import count
from typing import Any

_ids = count(1)


class Client:
    __slots__ = (
        "id", "addr", "laddr", "fd", "name", "proto", "authenticated", "ctime",
        "last_interaction", "last_cmd", "lib_name", "lib_ver", "closing",
        "monitor", "conn", "blocked_on", "block_deadline", "block_count",
        "block_withcounters", "blocked_since", "last_word", "last_command",
    )

    def __init__(self, addr: str = "", laddr: str = "", fd: int = -1, now: int = 0,
                 client_id: int | None = None) -> None:
        self.id = next(_ids) if client_id is None else client_id
        self.addr = addr
        self.laddr = laddr
        self.fd = fd
        self.name = b""
        self.proto = 2              # RESP version, switched by HELLO 3
        self.authenticated = False
        self.ctime = now
        self.last_interaction = now
        self.last_cmd = b"NULL"
        self.lib_name = b""
        self.lib_ver = b""
        self.closing = False        # QUIT / CLIENT KILL: close once replies are flushed
        self.monitor = False
        self.conn: Any = None
        # GETJOB blocking state: the queues (list of Queue) or None.
        self.blocked_on: Any = None
        self.block_deadline = 0     # ms, 0 = forever
        self.block_count = 1
        self.block_withcounters = False
        self.blocked_since = 0
        # The request word that named the last command and that command: the
        # compiled reader hands a repeated name back as the same object, so
        # dispatch finds the command by identity (Node.handle_command).
        self.last_word: Any = None
        self.last_command: Any = None

    @property
    def blocked(self) -> bool:
        return self.blocked_on is not None

    def __repr__(self) -> str:
        return f"<Client id={self.id} addr={self.addr}>"
