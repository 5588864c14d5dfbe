"""Dead letters: a job that failed ``max_attempts`` times is added to a
dead-letter queue (default ``<queue>:dead``) as a JSON envelope, then acked.

The envelope is JSON whatever the client's serializer, so any tool can read
it (``redis-cli QPEEK emails:dead 10``)::

    {"dead_letter": 1, "queue": "emails", "id": "D-...", "attempts": 5,
     "nacks": 4, "additional_deliveries": 0, "error": "ValueError: boom",
     "traceback": "...", "failed_at": 1700000000.0,
     "reason": "failures", "limit": "max_attempts",
     "body": "<the original body as text>"}      # or "body_base64" if not UTF-8

``reason`` says why the job came back too often (``"failures"``: its handler
raised; ``"lost-deliveries"``: its workers never answered), ``limit`` which
of the Worker's limits it reached (``disquette.poison``).

plus the error's ``dead_letter_fields`` when it has some (``disquette
dispatch``: ``status``, ``response``, ``url`` of the last attempt).

``requeue_dead`` adds the original bytes back to the original queue (a new
job, so its counters start again) and only then acks the dead letter.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .job import Job


def dead_queue_name(queue: str) -> str:
    return f"{queue}:dead"


def envelope(job: Job, error: BaseException | str, traceback_text: str | None,
             failed_at: float, reason: str | None = None, limit: str | None = None) -> bytes:
    """The dead-letter body for ``job`` failed with ``error``."""
    err = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    doc: dict[str, Any] = {
        "dead_letter": 1, "queue": job.queue, "id": job.id, "attempts": job.attempts,
        "nacks": job.nacks, "additional_deliveries": job.additional_deliveries,
        "error": err, "traceback": traceback_text, "failed_at": failed_at,
        "reason": reason, "limit": limit,
    }
    # What the error knows of the failure (the webhook dispatcher's last HTTP
    # status and response, disquette/dispatch.py) is kept beside it.
    extra = getattr(error, "dead_letter_fields", None)
    if isinstance(extra, dict):
        doc.update({k: v for k, v in extra.items() if k not in doc})
    try:
        doc["body"] = job.raw.decode("utf-8")
    except UnicodeDecodeError:
        doc["body_base64"] = base64.b64encode(job.raw).decode()
    return json.dumps(doc, ensure_ascii=False).encode()


class DeadLetter:
    """A job of a dead-letter queue, read back: ``queue`` and ``job_id`` of
    the original job, ``attempts``, ``error``, ``traceback``, ``failed_at``,
    ``reason`` and ``limit`` (see the module doc), ``raw`` (its original
    bytes), ``body`` (decoded by the client's serializer) and ``job`` (the
    dead-letter job itself).  A job of that queue that is not an envelope is
    kept with ``queue`` None and ``raw`` its body."""

    __slots__ = ("job", "queue", "job_id", "attempts", "error", "traceback", "failed_at",
                 "raw", "body", "reason", "limit")

    def __init__(self, job: Job, doc: dict[str, Any] | None, serializer: Any) -> None:
        self.job = job
        doc = doc or {}
        self.queue: str | None = doc.get("queue")
        self.job_id: str | None = doc.get("id")
        self.attempts: int | None = doc.get("attempts")
        self.error: str | None = doc.get("error")
        self.traceback: str | None = doc.get("traceback")
        self.failed_at: float | None = doc.get("failed_at")
        self.reason: str | None = doc.get("reason")
        self.limit: str | None = doc.get("limit")
        if "body_base64" in doc:
            self.raw = base64.b64decode(doc["body_base64"])
        elif "body" in doc:
            self.raw = doc["body"].encode("utf-8")
        else:
            self.raw = job.raw
        self.body = serializer.decode(self.raw)

    @classmethod
    def from_job(cls, job: Job, serializer: Any) -> "DeadLetter":
        try:
            doc = json.loads(job.raw)
        except ValueError:
            doc = None
        if not (isinstance(doc, dict) and doc.get("dead_letter") == 1):
            doc = None
        return cls(job, doc, serializer)

    def as_dict(self) -> dict[str, Any]:
        """For printing (the ``disquette dead list`` output)."""
        body = self.raw.decode("utf-8", "replace")
        return {"dead_id": self.job.id, "queue": self.queue, "id": self.job_id,
                "attempts": self.attempts, "error": self.error, "failed_at": self.failed_at,
                "reason": self.reason, "limit": self.limit, "body": body}

    def __repr__(self) -> str:
        return (f"<DeadLetter {self.job_id} queue={self.queue!r} reason={self.reason!r} "
                f"error={self.error!r}>")
