"""How an HTTP request runs commands: exactly as a RESP connection does.

One ``Session`` per request: a core client (``node.new_client``) whose
``conn`` is an ``HttpConn``. A command goes through ``node.handle_command``
(same table, limits, auth, errors); an immediate reply goes through
``driver.write_reply`` (so it is held until the AOF has the records of its
turn), a later one (a blocked GETJOB, a sync ADDJOB) comes through
``conn.deliver``; both resolve the future the request awaits. Then
``driver.after_input()``, as after any input.

A client that is blocked cannot run another command, so a request that has
several in flight at once (a batch of synchronous ADDJOBs) gets a fresh core
client for the next one whenever one blocks. ``close`` ends every client the
request used: a long poll whose HTTP client went away unblocks its GETJOB.
"""

from __future__ import annotations

import asyncio
from collections import deque

from broker.node import BLOCKED
from protocol.resp import Error


class ConnectionGone(Exception):
    """The core closed the client (CLIENT KILL, SHUTDOWN) before its reply."""


class HttpConn:
    """``client.conn`` of one core client: its replies, in order, resolve the
    futures of the commands that asked for them."""

    __slots__ = ("session", "client", "waiters", "closed")

    def __init__(self, session: "Session", client) -> None:
        self.session = session
        self.client = client
        self.waiters: deque = deque()
        self.closed = False

    def write_now(self, reply) -> None:
        if self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(reply)

    deliver = write_now     # later replies arrive in the same order

    def close(self) -> None:
        """The request is over, or the core closes the client (CLIENT KILL,
        shutdown): a blocked command is unblocked, waiting futures fail."""
        if not self.closed:
            self.closed = True
            self.session.node.client_closed(self.client)
            while self.waiters:
                fut = self.waiters.popleft()
                if not fut.done():
                    fut.set_exception(ConnectionGone("connection closed by the server"))


class Session:
    """The core clients of one HTTP request (see the module doc)."""

    __slots__ = ("node", "driver", "loop", "addr", "laddr", "conns", "conn")

    def __init__(self, node, driver, loop, addr: str, laddr: str) -> None:
        self.node = node
        self.driver = driver
        self.loop = loop
        self.addr = addr
        self.laddr = laddr
        self.conns: list[HttpConn] = []
        self.conn: HttpConn | None = None     # the client free for the next command

    def _free_conn(self) -> HttpConn:
        conn = self.conn
        if conn is None or conn.closed:
            client = self.node.new_client(self.addr, self.laddr, -1)
            conn = self.conn = HttpConn(self, client)
            client.conn = conn
            if self.conns:      # the same credentials as the request's first client
                client.authenticated = self.conns[0].client.authenticated
            self.conns.append(conn)
        return conn

    def submit(self, argv: list) -> asyncio.Future:
        """Run one command now; its reply will resolve the returned future.
        Call ``flush()`` once the inputs are in."""
        conn = self._free_conn()
        fut = self.loop.create_future()
        conn.waiters.append(fut)
        reply = self.node.handle_command(conn.client, argv)
        if reply is BLOCKED:
            self.conn = None        # its reply comes later: the next command needs another
        else:
            self.driver.write_reply(conn, reply)
        return fut

    def run(self, argv: list):
        """``submit``, except that a reply nothing holds back (no AOF: there
        are no records to wait for) is returned as it is, with no future: a
        batch of thousands of ADDJOBs creates futures only for those that block."""
        if self.driver.aof is not None:
            return self.submit(argv)
        conn = self._free_conn()
        reply = self.node.handle_command(conn.client, argv)
        if reply is not BLOCKED:
            return reply
        fut = self.loop.create_future()     # delivered after flush(), never before
        conn.waiters.append(fut)
        self.conn = None
        return fut

    def flush(self) -> None:
        """After the inputs: what the driver does after any input."""
        self.driver.after_input()

    async def call(self, *args):
        """One command, its reply value (an ``Error`` is returned, not raised)."""
        fut = self.submit([a if isinstance(a, bytes) else str(a).encode() for a in args])
        self.flush()
        return await fut

    async def authenticate(self, password: str) -> Error | None:
        """AUTH, as a RESP client sends it first: None, or the error reply.
        Without requirepass there is nothing to check (the header is ignored)."""
        if not self.node.config.requirepass:
            return None
        reply = await self.call(b"AUTH", password.encode("utf-8", "surrogateescape"))
        return reply if isinstance(reply, Error) else None

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        self.conns.clear()
        self.conn = None
        self.driver.after_input()
