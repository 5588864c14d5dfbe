"""The asyncio client: the same methods as :class:`~disquette.Client`, awaitable."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, AsyncIterator, Iterable

import hiredis
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from .clientbase import (
    CONNECTION_ERRORS, REFRESH_ERRORS, REPLY_ERRORS, ClientBase, NodeFailed, batch_lost,
    classify_lost, classify_reply_error, log, tag_item,
)
from .commands import (
    Request, _parse_scan, batch_requests, peek_request, scan_args, take_request,
)
from .dead_letters import DeadLetter
from .errors import AddJobsError, DisqueError, ReplyLostError, reply_error
from .job import Job

DEFAULT_BATCH = 1000
IDLE_KEPT = 16  # connections per node kept checked out between commands


def _packed(conn: Any, reqs: list[Request]) -> Any:
    """The requests as one write, packed by hiredis in C (redis-py's asyncio
    connection packs in Python, argument by argument: the Worker's biggest
    cost per job); by redis-py for what hiredis cannot encode (names with
    surrogate-escaped bytes, other types)."""
    try:
        return b"".join([hiredis.pack_command(r.args) for r in reqs])
    except (TypeError, UnicodeEncodeError):
        return conn.pack_commands([r.args for r in reqs])


def _timed_out(node: str) -> redis.exceptions.TimeoutError:
    return redis.exceptions.TimeoutError(f"Timeout reading from {node}")


class AsyncClient(ClientBase):
    """The asyncio twin of :class:`~disquette.Client` (same options, same
    failover rules)::

        async with AsyncClient("disque://127.0.0.1:7711") as c:
            await c.add_job("emails", b"raw bytes")
            async for job in c.jobs("emails"):
                await job.ack()

    One instance belongs to one event loop.
    """

    _retry_class = Retry

    def __init__(self, nodes: Any = None, **options: Any) -> None:
        super().__init__(nodes, **options)
        if self._ssl:
            self._conn_kwargs["connection_class"] = redis.asyncio.SSLConnection
        self._conn_kwargs["retry"] = Retry(NoBackoff(), 0)  # failover is ours
        # Time limits are ours too: one timer per command or batch, from its
        # write to its last reply (_attempt, _attempt_batch).  redis-py's own
        # would add a Task per write (asyncio.wait_for) and a timer per reply,
        # as much CPU as the Worker's handling of a dozen jobs.
        self._conn_kwargs["socket_timeout"] = None
        self._idle: dict[str, list[Any]] = {}

    # -- plumbing
    def _pool(self, node: str) -> redis.asyncio.ConnectionPool:
        pool = self._pools.get(node)
        if pool is None:
            pool = self._pools[node] = redis.asyncio.ConnectionPool(**self._pool_args(node))
        return pool

    async def _connection(self, node: str) -> tuple[Any, Any]:
        """A connected connection to ``node``.  Connections this client used
        last are kept checked out of redis-py's pool and reused while clean
        (no EOF seen, nothing unread: the pool's own check, minus its async
        lock and bookkeeping, which cost as much as a small command)."""
        pool = self._pool(node)
        idle = self._idle.get(node)
        while idle:
            conn = idle.pop()
            try:
                if conn.is_connected and not await conn.can_read():
                    return pool, conn
            except CONNECTION_ERRORS:
                pass
            await pool.release(conn)  # the pool reconnects it, or reports why not
        try:
            async with asyncio.timeout(self._handshake_timeout()):
                return pool, await pool.get_connection()
        except REPLY_ERRORS as e:  # refused at the handshake (AUTH, HELLO 3)
            raise reply_error(e, node) from e
        except TimeoutError as e:  # ours (redis-py's connect timeout raises its own)
            # The handshake was cut short: its connection went back to the
            # pool open but not set up.
            await pool.disconnect(inuse_connections=False)
            raise NodeFailed(node, redis.exceptions.TimeoutError(
                f"Timeout connecting to {node}"), sent=False) from e
        except CONNECTION_ERRORS as e:
            raise NodeFailed(node, e, sent=False) from e

    def _handshake_timeout(self) -> float | None:
        if self.socket_timeout is None:
            return None
        return self.socket_timeout + (self._conn_kwargs.get("socket_connect_timeout") or 0.0)

    async def _attempt(self, req: Request, tries: list[int]) -> Any:
        node = self._target(req, tries)
        pool, conn = await self._connection(node)
        try:
            # The request's time limit, from the write to the reply.  (redis-py's
            # ``read_response(timeout=t)`` answers None on timeout and keeps the
            # connection, whose late reply would then go to the next command:
            # the limit is enforced here, and the connection dropped on expiry.)
            async with asyncio.timeout(self._read_timeout(req)):
                await conn.send_packed_command(_packed(conn, [req]))
                reply = await conn.read_response(timeout=math.inf)
        except REPLY_ERRORS as e:
            raise classify_reply_error(e, node) from e
        except TimeoutError as e:
            await conn.disconnect(nowait=True)
            raise classify_lost(_timed_out(node), req, node) from e
        except CONNECTION_ERRORS as e:
            await conn.disconnect(nowait=True)
            raise classify_lost(e, req, node) from e
        finally:
            await self._release(node, pool, conn)
        return req.parse(reply, self, node) if req.parse else reply

    async def _release(self, node: str, pool: Any, conn: Any) -> None:
        idle = self._idle.setdefault(node, [])
        if conn.is_connected and len(idle) < IDLE_KEPT:
            idle.append(conn)
        else:
            await pool.release(conn)

    async def _afailed(self, error: Exception) -> None:
        self._failed(error)

    async def _with_failover(self, attempt: Any, *args: Any) -> Any:
        try:
            return await self._retry.call_with_retry(lambda: attempt(*args), self._afailed)
        except NodeFailed as e:
            raise e.final() from e.error

    async def _maybe_refresh(self) -> None:
        refresh = self._refresh_request()
        if refresh is not None:
            try:  # one attempt: on failure the command itself fails over
                await self._attempt(refresh, [0])
            except NodeFailed as e:
                self._failed(e)
            except REFRESH_ERRORS as e:
                log.debug("topology refresh failed: %s", e)

    async def _run(self, req: Request) -> Any:
        await self._maybe_refresh()
        return await self._with_failover(self._attempt, req, [0])

    async def _on_node(self, req: Request) -> Any:
        """One attempt on ``req.node`` only (per-node scans of dead letters)."""
        try:
            return await self._attempt(req, [0])
        except NodeFailed as e:
            raise e.final() from e.error

    # -- batches
    async def _attempt_batch(self, reqs: list[Request], start: int) -> list[Any]:
        """The requests in one write, then their replies, each within its
        request's time limit (one timer, moved on for each reply)."""
        node = self._topology.current
        pool, conn = await self._connection(node)
        out: list[Any] = []
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._read_timeout(reqs[0])) as limit:
                await conn.send_packed_command(_packed(conn, reqs))
                for i, req in enumerate(reqs):
                    if i:
                        seconds = self._read_timeout(req)
                        limit.reschedule(None if seconds is None else loop.time() + seconds)
                    try:
                        reply = await conn.read_response(timeout=math.inf)
                        out.append(req.parse(reply, self, node))
                    except REPLY_ERRORS as e:
                        out.append(tag_item(reply_error(e, node), start + i, req))
        except (TimeoutError, *CONNECTION_ERRORS) as e:
            await conn.disconnect(nowait=True)
            if isinstance(e, TimeoutError):
                e = _timed_out(node)
            return out + batch_lost(reqs[len(out):], start + len(out), e, node)
        finally:
            await self._release(node, pool, conn)
        return out

    async def _ack_and_get(self, ack: Request, get: Request) -> list[Any]:
        """The worker's fetch: an ACKJOB and a GETJOB in one write to the
        current node, so finished jobs cost no round trip of their own.
        Returns both results (a value or the exception, per request)."""
        await self._maybe_refresh()
        return await self._with_failover(self._attempt_batch, [ack, get], 0)

    async def add_jobs(self, jobs: Iterable[Any], *, batch_size: int = DEFAULT_BATCH,
                       raise_on_error: bool = True, **defaults: Any) -> list[Any]:
        """Pipelined batch producer: see :meth:`disquette.Client.add_jobs`."""
        reqs = batch_requests(self.serializer, jobs, defaults)
        await self._maybe_refresh()
        results: list[Any] = []
        for start in range(0, len(reqs), batch_size):
            chunk = reqs[start:start + batch_size]
            try:
                results += await self._with_failover(self._attempt_batch, chunk, start)
            except DisqueError as e:  # no node reachable: nothing of this batch sent
                results += [tag_item(e, start + i, r) for i, r in enumerate(chunk)]
        for i, r in enumerate(results):
            if isinstance(r, ReplyLostError) and reqs[i].resend:
                # An item with an idempotency_key: safe to add again, elsewhere.
                try:
                    results[i] = await self._run(reqs[i])
                except DisqueError as e:
                    results[i] = tag_item(e, i, reqs[i])
        if raise_on_error and any(isinstance(r, Exception) for r in results):
            raise AddJobsError(results)
        return results

    # -- iterators
    async def jobs(self, *queues: str, count: int = 1, timeout_ms: int | None = None,
                   poll_ms: int = 1000, withcounters: bool = True) -> AsyncIterator[Job]:
        """``async for job in client.jobs("emails")``: a blocking GETJOB loop
        (see :meth:`disquette.Client.jobs`)."""
        idle_since = time.monotonic()
        while True:
            batch = await self.get_jobs(*queues, count=count, timeout_ms=poll_ms,
                                        withcounters=withcounters)
            if batch:
                for job in batch:
                    yield job
                idle_since = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                return

    async def _scan(self, command: str, count: int | None,
                    options: list[Any]) -> AsyncIterator[Any]:
        node, cursor = self.node, 0
        while True:
            cursor, items = await self._run(Request(scan_args(command, cursor, count, options),
                                                    _parse_scan, node=node))
            for item in items:
                yield item
            if cursor == 0:
                return

    # -- dead letters
    async def dead_letters(self, dead_queue: str, limit: int | None = None) -> list[DeadLetter]:
        """See :meth:`disquette.Client.dead_letters`."""
        await self._maybe_refresh()
        out: dict[str, DeadLetter] = {}
        for node in self.nodes:
            try:
                jobs = await self._on_node(peek_request(dead_queue, limit, node))
            except DisqueError:
                continue
            for d in self._dead_queue_jobs(jobs):
                out.setdefault(d.job.id, d)
        return list(out.values())[:limit]

    async def requeue_dead(self, dead_queue: str, queue: str | None = None,
                           limit: int | None = None) -> int:
        """See :meth:`disquette.Client.requeue_dead`."""
        await self._maybe_refresh()
        moved = 0
        for node in self.nodes:
            while limit is None or moved < limit:
                try:
                    jobs = await self._on_node(take_request(dead_queue, limit, moved, node))
                except DisqueError:
                    break
                if not jobs:
                    break
                for d in self._dead_queue_jobs(jobs):
                    await self.add_job(queue or d.queue or dead_queue, d.raw)
                    await self.ack_job(d.job.id, node=node)
                    moved += 1
        return moved

    # -- lifecycle
    async def aclose(self) -> None:
        for node, idle in self._idle.items():
            for conn in idle:
                await self._pools[node].release(conn)
        self._idle.clear()
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.disconnect()

    close = aclose

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

