"""Results: a handler's return value (or its last error) carried back to the
producer as a job, in a reply queue of the producer's own.

    job = send_report.enqueue(7)          # a task with results=True
    job.result(timeout=10)                # the value, or raises JobError
    await job.result(timeout=10)          # the same, on an App over an AsyncClient

The producer's App names one reply queue (``<prefix>:reply:<random>``) and
puts it in the body of the jobs whose results it wants, with the node it
talks to and the result's TTL.  The worker adds the result there (to that
node first, so the producer's blocking GETJOB gets it without federation)
once the handler returned, or once it failed for the last time (the job is
dead-lettered): ``[job id, true, value]`` or ``[job id, false, [type,
message, traceback]]``.  ``result()`` takes the replies of its queue and
keeps those of the other jobs it enqueued for their own ``result()``.
Nothing else stores results; one not read is gone after its TTL.  A job run
twice (at least once delivery) may answer twice: the first answer counts.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback as tb_module
import uuid
from typing import Any

from .commands import Request, _parse_jobs, addjob_request, getjob_request
from .errors import DisqueError, JobError
from .job import Job

log = logging.getLogger("disquette.results")

REPLY_POLL_MS = 1000  # one GETJOB of the reply queue blocks this long at most
NO_VALUE: Any = object()


def reply_queue_name(prefix: str) -> str:
    return f"{prefix}:reply:{uuid.uuid4().hex}"


def ok_reply(job_id: str, value: Any) -> list[Any]:
    return [job_id, True, value]


def error_reply(job_id: str, error: BaseException) -> list[Any]:
    text = "".join(tb_module.format_exception(type(error), error, error.__traceback__))
    return [job_id, False, [type(error).__name__, str(error), text]]


def _outcome(reply: list[Any]) -> Any:
    """The value of a reply, or the JobError it carries (returned, not raised)."""
    job_id, ok, value = reply
    if ok:
        return value
    kind, message, text = value
    return JobError(job_id, kind, message, text)


class Replies:
    """The producer's side: its reply queue and what came back on it.  One
    per App; ``wait`` (sync clients, thread safe) and ``await_`` (AsyncClient)."""

    def __init__(self, prefix: str) -> None:
        self.queue = reply_queue_name(prefix)
        self.pending: set[str] = set()    # ids whose result() may still be asked
        self.arrived: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._alock: asyncio.Lock | None = None

    def route(self, client: Any, ttl: int) -> list[Any]:
        """What a job's body carries for its result: the queue, the node, the TTL."""
        return [self.queue, client.node, ttl]

    def _take(self, jobs: list[Job], client: Any) -> list[str]:
        """File the replies fetched; returns the ids to ack."""
        for job in jobs:
            reply = job.body
            if (isinstance(reply, list) and len(reply) == 3 and isinstance(reply[0], str)
                    and reply[0] in self.pending and reply[0] not in self.arrived):
                self.arrived[reply[0]] = _outcome(reply)
        return [j.id for j in jobs]

    def _request(self, left: float) -> Request:
        ms = max(1, min(REPLY_POLL_MS, int(left * 1000)))
        return getjob_request((self.queue,), 100, ms, False, False)._replace(parse=_parse_jobs)

    def _result(self, job_id: str) -> Any:
        self.pending.discard(job_id)
        value = self.arrived.pop(job_id)
        if isinstance(value, JobError):
            raise value
        return value

    def wait(self, client: Any, job_id: str, timeout: float | None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if job_id in self.arrived:
                    return self._result(job_id)
                left = REPLY_POLL_MS / 1000 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no result for job {job_id} after {timeout} s")
                jobs = client._run(self._request(left))
                if jobs:
                    client.fast_ack(*self._take(jobs, client), node=jobs[0].node)

    async def await_(self, client: Any, job_id: str, timeout: float | None) -> Any:
        if self._alock is None:
            self._alock = asyncio.Lock()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            async with self._alock:
                if job_id in self.arrived:
                    return self._result(job_id)
                left = REPLY_POLL_MS / 1000 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no result for job {job_id} after {timeout} s")
                jobs = await client._run(self._request(left))
                if jobs:
                    await client.fast_ack(*self._take(jobs, client), node=jobs[0].node)


class EnqueuedJob:
    """What ``task.enqueue(...)`` returns: ``id``, ``queue``, and
    ``result(timeout=None)`` for a task with results (awaitable on an App
    over an AsyncClient).  ``result`` raises :class:`~disquette.JobError`
    when the handler failed for the last time, TimeoutError when nothing
    came back in ``timeout`` seconds."""

    __slots__ = ("id", "queue", "_app", "_replies")

    def __init__(self, job_id: str, queue: str, app: Any, replies: Replies | None) -> None:
        self.id, self.queue, self._app, self._replies = job_id, queue, app, replies
        if replies is not None:
            replies.pending.add(job_id)

    def result(self, timeout: float | None = None) -> Any:
        if self._replies is None:
            raise RuntimeError(f"job {self.id} was enqueued without results: give its task "
                               "results=True (@app.job or .with_options)")
        if self._app.is_async:
            return self._replies.await_(self._app.client, self.id, timeout)
        return self._replies.wait(self._app.client, self.id, timeout)

    def __repr__(self) -> str:
        return f"<EnqueuedJob {self.id} queue={self.queue!r}>"


async def send_result(aclient: Any, route: Any, reply: list[Any]) -> None:
    """The worker's side: add ``reply`` to the producer's reply queue, on its
    node first.  A value the serializer cannot write goes back as an error.
    A result that cannot be added is lost (logged), not the job's failure:
    the job is done, and running it again would not help its reader."""
    queue, node, ttl = route
    try:
        raw = aclient.serializer.encode(reply)
    except (TypeError, ValueError) as e:
        raw = aclient.serializer.encode(error_reply(reply[0], e))
    req = addjob_request(aclient.serializer, queue, raw, 5000, {"ttl": ttl})
    try:
        await aclient._run(req._replace(node=node))
    except DisqueError as e:
        log.warning("result of job %s not sent to %s (%s)", reply[0], queue, e)
