"""Typed errors of the SDK, all under :class:`DisqueError`.

Every call ends in exactly one of three outcomes, and the type says which
(the chaos suite and any careful producer rely on this):

* it returned: the command took effect (``add_job`` returned the job id);
* it raised :class:`ReplyError` (or a subclass): a node answered with an
  error, so the command did not take effect there.  ``-NOREPL Timeout reached``
  is the one soft spot, as in Disque: the node best-effort deletes the copies it
  made, so such a job is not acknowledged but may rarely still be delivered;
* it raised :class:`DisqueConnectionError`: no answer.  ``err.sent`` tells
  whether the command may have run: :class:`NoNodeAvailableError` (``sent`` is
  False) means it never left this process, :class:`ReplyLostError` (``sent`` is
  True) means it was written to a node and the connection failed before the
  reply: indeterminate (an ``add_job`` may or may not have created the job).
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.exceptions


class DisqueError(Exception):
    """Base class of every error the SDK raises."""


class ReplyError(DisqueError):
    """The node answered with an error reply: the command did not take effect.

    ``code`` is the reply's first word (``NOREPL``, ``ERR``...), ``message`` the
    whole text as the server sent it, ``node`` the ``host:port`` that answered.
    """

    code = "ERR"

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        first = message.split(" ", 1)[0]
        if first.isupper():
            self.code = first


class NoReplicationError(ReplyError):
    """``-NOREPL``: not enough reachable nodes, or the ms-timeout passed first."""

    code = "NOREPL"


class QueuePausedError(ReplyError):
    """``-PAUSED``: the queue is paused in input."""

    code = "PAUSED"


class MaxLenError(ReplyError):
    """``-MAXLEN``: the queue already holds MAXLEN jobs."""

    code = "MAXLEN"


class OutOfMemoryError(ReplyError):
    """``-OOM``: the node is over ``maxmemory``."""

    code = "OOM"


class LeavingError(ReplyError):
    """``-LEAVING``: the node is leaving the cluster (the client moves on)."""

    code = "LEAVING"


class NoJobError(ReplyError):
    """``-NOJOB``: the node does not know the job (WORKING)."""

    code = "NOJOB"


class TooLateError(ReplyError):
    """``-TOOLATE``: half of the job's TTL elapsed; WORKING is refused."""

    code = "TOOLATE"


class BadJobIdError(ReplyError):
    """``-BADID``: a malformed job id; the whole command was refused."""

    code = "BADID"


class LoadingError(ReplyError):
    """``-LOADING``: the node is still loading its AOF."""

    code = "LOADING"


class AuthenticationError(ReplyError):
    """``-NOAUTH`` / ``-WRONGPASS`` / invalid password."""

    code = "NOAUTH"


class PersistenceError(ReplyError):
    """``-MISCONF``: the node cannot write its AOF, so it refuses new jobs."""

    code = "MISCONF"


class DisqueConnectionError(DisqueError):
    """No reply.  ``sent`` says whether the command may have run; ``node`` is
    the last ``host:port`` tried."""

    sent = False

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class NoNodeAvailableError(DisqueConnectionError):
    """No node could be reached: the command was never sent (it did not run)."""

    sent = False


class ReplyLostError(DisqueConnectionError):
    """The command was sent, then the connection failed before its reply:
    the outcome is unknown (indeterminate)."""

    sent = True


class LeaseLost(asyncio.CancelledError):
    """A running job is no longer this worker's: WORKING answered TOOLATE or
    NOJOB (it may be queued again, or handled, or acked by someone else).

    The Worker raises it inside an ``async def`` handler at its current
    ``await`` (the handler's task is cancelled with it) and from
    ``job.working()`` in a ``def`` handler (which can also poll
    ``job.lease_lost``); the worker then neither acks nor nacks the job.
    A cancellation, not an ``Exception``: ``except Exception`` in a handler
    does not swallow it.  ``job_id``, ``reason`` (the node's reply)."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id}: lease lost ({reason})")
        self.job_id = job_id
        self.reason = reason


class JobTimeout(Exception):
    """A handler ran past its time limit (``timeout=`` of ``@app.job`` or
    ``.with_options``): an ``async def`` one was cancelled, a ``def`` one's
    thread left to finish alone (its result ignored).  The job failed; a dead
    letter it ends in says reason ``"timeout"``.  ``seconds``: the limit."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"ran past its time limit of {seconds:g} s")
        self.seconds = seconds


class JobError(DisqueError):
    """What ``job.result()`` raises when the job's handler failed for the
    last time (dead-lettered): ``type`` (the exception's class name),
    ``message`` and ``traceback`` (text), as the worker sent them."""

    def __init__(self, job_id: str, type: str, message: str, traceback: str | None) -> None:
        super().__init__(f"job {job_id} failed: {type}: {message}")
        self.job_id, self.type, self.message, self.traceback = job_id, type, message, traceback


class AddJobsError(DisqueError):
    """``add_jobs`` finished with some items refused or indeterminate.

    ``results`` has one entry per item, in order: the job id (``str``) or the
    exception for that item (a :class:`ReplyError` or :class:`ReplyLostError`
    whose ``index`` and ``queue`` attributes name the item).  ``errors`` lists
    just the failed ``(index, exception)`` pairs.
    """

    def __init__(self, results: list[Any]) -> None:
        self.results = results
        self.errors = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
        i, first = self.errors[0]
        more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        super().__init__(
            f"{len(self.errors)} of {len(results)} jobs not added; item {i} "
            f"(queue {getattr(first, 'queue', '?')!r}): {first}{more}"
        )


_BY_CODE: dict[str, type[ReplyError]] = {
    cls.code: cls
    for cls in (
        NoReplicationError, QueuePausedError, MaxLenError, OutOfMemoryError, LeavingError,
        NoJobError, TooLateError, BadJobIdError, LoadingError, PersistenceError,
    )
}
_BY_CODE["WRONGPASS"] = AuthenticationError
_BY_CODE["NOAUTH"] = AuthenticationError


def reply_error(exc: redis.exceptions.RedisError, node: str | None) -> ReplyError:
    """The typed error for a redis-py error reply, with the server's full text
    (redis-py strips the code of the replies it knows, e.g. ``OOM``)."""
    text = str(exc)
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(code):
        text = f"{code} {text}"
    if isinstance(exc, redis.exceptions.AuthenticationError):
        return AuthenticationError(text, node=node)
    cls = _BY_CODE.get(text.split(" ", 1)[0], ReplyError)
    return cls(text, node=node)
