"""The synchronous client, on redis-py's connection pools (thread safe)."""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from .aio import AsyncClient
from .clientbase import (
    CONNECTION_ERRORS, REFRESH_ERRORS, REPLY_ERRORS, ClientBase, NodeFailed, batch_lost,
    classify_lost, classify_reply_error, log, options_of, tag_item,
)
from .commands import (
    Request, _parse_scan, batch_requests, peek_request, scan_args, take_request,
)
from .dead_letters import DeadLetter
from .errors import AddJobsError, DisqueError, ReplyLostError, reply_error
from .job import Job

DEFAULT_BATCH = 1000


class Client(ClientBase):
    """A Disque client for a whole cluster (see ``ClientBase`` for options)::

        client = Client("disque://127.0.0.1:7711,127.0.0.1:7712")
        jid = client.add_job("emails", {"to": 42}, retry=60)
        for job in client.get_jobs("emails", count=10, timeout_ms=1000):
            ...
            job.ack()

    Commands go to the current node (``client.node``): the first listed
    node that answers, then the best by HELLO priority.  On a connection
    error or ``-LEAVING`` the client marks the node down and retries on the
    next one with redis-py's ``Retry`` backoff; a command whose reply was lost
    is only re-sent if that is safe (never ADDJOB: see ``disquette.errors``).
    """

    _retry_class = Retry

    def __init__(self, nodes: Any = None, **options: Any) -> None:
        super().__init__(nodes, **options)
        if self._ssl:
            self._conn_kwargs["connection_class"] = redis.SSLConnection
        self._conn_kwargs["retry"] = Retry(NoBackoff(), 0)  # failover is ours

    # -- plumbing
    def _pool(self, node: str) -> redis.ConnectionPool:
        pool = self._pools.get(node)
        if pool is None:  # setdefault: two threads racing here share one pool
            pool = self._pools.setdefault(node, redis.ConnectionPool(**self._pool_args(node)))
        return pool

    def _connection(self, node: str) -> tuple[redis.ConnectionPool, Any]:
        pool = self._pool(node)
        try:
            return pool, pool.get_connection()
        except REPLY_ERRORS as e:  # refused at the handshake (AUTH, HELLO 3)
            raise reply_error(e, node) from e
        except CONNECTION_ERRORS as e:
            raise NodeFailed(node, e, sent=False) from e

    def _attempt(self, req: Request, tries: list[int]) -> Any:
        node = self._target(req, tries)
        pool, conn = self._connection(node)
        try:
            conn.send_command(*req.args)
            if req.timeout == 0.0:
                reply = conn.read_response()
            else:
                reply = conn.read_response(timeout=self._read_timeout(req))
        except REPLY_ERRORS as e:
            raise classify_reply_error(e, node) from e
        except CONNECTION_ERRORS as e:
            conn.disconnect()
            raise classify_lost(e, req, node) from e
        finally:
            pool.release(conn)
        return req.parse(reply, self, node) if req.parse else reply

    def _with_failover(self, attempt: Any, *args: Any) -> Any:
        try:
            return self._retry.call_with_retry(lambda: attempt(*args), self._failed)
        except NodeFailed as e:
            raise e.final() from e.error

    def _maybe_refresh(self) -> None:
        refresh = self._refresh_request()
        if refresh is not None:
            try:  # one attempt: on failure the command itself fails over
                self._attempt(refresh, [0])
            except NodeFailed as e:
                self._failed(e)
            except REFRESH_ERRORS as e:
                log.debug("topology refresh failed: %s", e)

    def _run(self, req: Request) -> Any:
        self._maybe_refresh()
        return self._with_failover(self._attempt, req, [0])

    def _on_node(self, req: Request) -> Any:
        """One attempt on ``req.node`` only (per-node scans of dead letters)."""
        try:
            return self._attempt(req, [0])
        except NodeFailed as e:
            raise e.final() from e.error

    # -- batches
    def _attempt_batch(self, reqs: list[Request], start: int) -> list[Any]:
        node = self._topology.current
        pool, conn = self._connection(node)
        out: list[Any] = []
        try:
            try:
                conn.send_packed_command(conn.pack_commands([r.args for r in reqs]))
            except CONNECTION_ERRORS as e:
                conn.disconnect()
                return batch_lost(reqs, start, e, node)
            for i, req in enumerate(reqs):
                try:
                    reply = conn.read_response(timeout=self._read_timeout(req))
                    out.append(req.parse(reply, self, node))
                except REPLY_ERRORS as e:
                    out.append(tag_item(reply_error(e, node), start + i, req))
                except CONNECTION_ERRORS as e:
                    conn.disconnect()
                    return out + batch_lost(reqs[i:], start + i, e, node)
        finally:
            pool.release(conn)
        return out

    def add_jobs(self, jobs: Iterable[Any], *, batch_size: int = DEFAULT_BATCH,
                 raise_on_error: bool = True, **defaults: Any) -> list[Any]:
        """Add many jobs, pipelined ``batch_size`` at a time on one connection.

        Each item is ``(queue, body)``, ``(queue, body, {options})`` or a dict
        ``{"queue": ..., "body": ..., "retry": ...}``; ``defaults`` (any
        ``add_job`` option, e.g. ``timeout_ms=0, replicate=2``) apply to every
        item that does not set them.  A malformed item raises TypeError naming
        it before anything is sent.

        Every reply is checked.  Returns the job ids in item order; if any item
        failed, raises :class:`AddJobsError` after the whole input was tried,
        whose ``results`` hold an id or an exception per item (with
        ``raise_on_error=False`` that list is returned instead).  An item's
        exception is a :class:`ReplyError` (the node refused it: not added) or
        :class:`ReplyLostError` (the connection broke after its batch was
        sent: indeterminate); it carries ``index`` and ``queue``.  A batch is
        never re-sent; the batches after a lost connection go to another node.
        Items with an ``idempotency_key`` (in their options or ``defaults``: a
        key per job) whose reply was lost are the exception: each is added
        again on its own, as ``add_job`` retries (see its doc).
        With synchronous replication (REPLICATE > 1) the node answers a
        pipeline one job at a time: use ``asynchronous=True`` or several
        clients for throughput.
        """
        reqs = batch_requests(self.serializer, jobs, defaults)
        self._maybe_refresh()
        results: list[Any] = []
        for start in range(0, len(reqs), batch_size):
            chunk = reqs[start:start + batch_size]
            try:
                results += self._with_failover(self._attempt_batch, chunk, start)
            except DisqueError as e:  # no node reachable: nothing of this batch sent
                results += [tag_item(e, start + i, r) for i, r in enumerate(chunk)]
        for i, r in enumerate(results):
            if isinstance(r, ReplyLostError) and reqs[i].resend:
                # An item with an idempotency_key: safe to add again, elsewhere.
                try:
                    results[i] = self._run(reqs[i])
                except DisqueError as e:
                    results[i] = tag_item(e, i, reqs[i])
        if raise_on_error and any(isinstance(r, Exception) for r in results):
            raise AddJobsError(results)
        return results

    def execute_many(self, commands: Iterable[tuple], *, node: str | None = None) -> list[Any]:
        """Send ``commands`` (tuples of arguments) pipelined on one connection
        to ``node`` (default: the current node) and return their replies in
        order; an error reply is returned as its :class:`ReplyError` (the
        other commands still ran).  No failover: a node that cannot be
        reached raises :class:`NoNodeAvailableError` (nothing sent), a
        connection lost after sending raises :class:`ReplyLostError`."""
        target = node or self.node
        reqs = [Request(tuple(args), node=target) for args in commands]
        if not reqs:
            return []
        try:
            pool, conn = self._connection(target)
        except NodeFailed as e:
            raise e.final() from e.error
        out: list[Any] = []
        try:
            conn.send_packed_command(conn.pack_commands([r.args for r in reqs]))
            for _ in reqs:
                try:
                    out.append(conn.read_response())
                except REPLY_ERRORS as e:
                    out.append(reply_error(e, target))
        except CONNECTION_ERRORS as e:
            conn.disconnect()
            raise NodeFailed(target, e, sent=True).final() from e
        finally:
            pool.release(conn)
        return out

    # -- iterators
    def jobs(self, *queues: str, count: int = 1, timeout_ms: int | None = None,
             poll_ms: int = 1000, withcounters: bool = True) -> Iterator[Job]:
        """Yield jobs as they come (a blocking GETJOB loop, ``poll_ms`` at a
        time so failover and topology refresh happen between calls).  Ends once
        nothing came for ``timeout_ms`` (default: never).  Ack what you take."""
        idle_since = time.monotonic()
        while True:
            batch = self.get_jobs(*queues, count=count, timeout_ms=poll_ms,
                                  withcounters=withcounters)
            if batch:
                yield from batch
                idle_since = time.monotonic()
            elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                return

    def _scan(self, command: str, count: int | None, options: list[Any]) -> Iterator[Any]:
        node, cursor = self.node, 0
        while True:
            cursor, items = self._run(Request(scan_args(command, cursor, count, options),
                                              _parse_scan, node=node))
            yield from items
            if cursor == 0:
                return

    # -- dead letters
    def dead_letters(self, dead_queue: str, limit: int | None = None) -> list[DeadLetter]:
        """The dead letters queued in ``dead_queue`` on every reachable node
        (QPEEK: nothing is taken)."""
        self._maybe_refresh()
        out: dict[str, DeadLetter] = {}
        for node in self.nodes:
            try:
                jobs = self._on_node(peek_request(dead_queue, limit, node))
            except DisqueError:
                continue
            for d in self._dead_queue_jobs(jobs):
                out.setdefault(d.job.id, d)
        return list(out.values())[:limit]

    def requeue_dead(self, dead_queue: str, queue: str | None = None,
                     limit: int | None = None) -> int:
        """Move dead letters back to work: each original body is added again
        to its original queue (or ``queue``), then the dead letter is acked.
        Returns how many were moved.  Visits every reachable node."""
        self._maybe_refresh()
        moved = 0
        for node in self.nodes:
            while limit is None or moved < limit:
                try:
                    jobs = self._on_node(take_request(dead_queue, limit, moved, node))
                except DisqueError:
                    break
                if not jobs:
                    break
                for d in self._dead_queue_jobs(jobs):
                    self.add_job(queue or d.queue or dead_queue, d.raw)
                    self.ack_job(d.job.id, node=node)
                    moved += 1
        return moved

    # -- lifecycle
    def as_async(self) -> Any:
        """An AsyncClient with the same options, starting on the same node."""
        return AsyncClient(**options_of(self))

    def close(self) -> None:
        for pool in self._pools.values():
            pool.disconnect()
        self._pools.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

