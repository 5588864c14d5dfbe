"""Webhook workers, Fireworq-style: each job of a queue is POSTed to a URL.

    disquette dispatch --queue emails --url http://mailer.internal/send --concurrency 8

An SDK ``Worker`` (disquette/worker.py) whose handler POSTs the job's bytes
(aiohttp's client) with the headers ``X-Disquette-Job-Id``,
``X-Disquette-Queue`` and ``X-Disquette-Attempt``:

* a 2xx answer acks the job;
* any other status, a timeout or a connection error fails the attempt: the
  job is NACKed after the backoff (``Backoff.delay(attempt)`` seconds,
  exponential by default; the job keeps its concurrency slot and the worker
  keeps it alive with WORKING meanwhile), so the next attempt comes no sooner;
* after ``max_attempts`` attempts the job goes to the dead-letter queue
  (``<queue>:dead``), the envelope keeping the last ``status`` (null for a
  timeout or a connection error), ``response`` (its first 4 KB) and ``url``;
* at most ``concurrency`` requests are in flight for the queue.

The backoff is an object with ``delay(attempt) -> seconds``: pass another one
to ``Dispatcher`` (a broker-side delayed NACK can replace the wait without
changing the rest).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

import aiohttp

from .worker import Worker

log = logging.getLogger("disquette.dispatch")

RESPONSE_KEPT = 4096      # characters of a failed answer kept in the dead letter


class ExponentialBackoff:
    """``base * factor ** (attempt - 1)`` seconds, at most ``cap``, with
    +-``jitter`` (a fraction) so that failed jobs do not come back together."""

    def __init__(self, base: float = 1.0, factor: float = 2.0, cap: float = 300.0,
                 jitter: float = 0.1, rng: random.Random | None = None) -> None:
        self.base, self.factor, self.cap, self.jitter = base, factor, cap, jitter
        self.rng = rng or random.Random()

    def delay(self, attempt: int) -> float:
        d = min(self.cap, self.base * self.factor ** max(attempt - 1, 0))
        return max(0.0, d * (1 + self.jitter * (2 * self.rng.random() - 1)))


class WebhookError(Exception):
    """The endpoint did not take the job; ``dead_letter_fields`` go into the
    dead letter (disquette/dead_letters.py) if this was the last attempt."""

    def __init__(self, url: str, status: int | None, response: str) -> None:
        super().__init__(f"HTTP {status}: {response[:200]}" if status is not None else response)
        self.url = url
        self.status = status
        self.response = response[:RESPONSE_KEPT]

    @property
    def dead_letter_fields(self) -> dict[str, Any]:
        return {"status": self.status, "response": self.response, "url": self.url}


def content_type(body: bytes) -> str:
    try:
        json.loads(body)
    except ValueError:
        return "application/octet-stream"
    return "application/json"


class Dispatcher:
    """POSTs the jobs of ``queue`` to ``url`` (see the module doc).
    ``client``: a disquette Client or AsyncClient; ``timeout``: seconds per
    request; ``headers``: sent with every request; the other options are the
    Worker's."""

    def __init__(self, client: Any, queue: str, url: str, *, concurrency: int = 8,
                 timeout: float = 30.0, max_attempts: int = 5, backoff: Any = None,
                 headers: dict[str, str] | None = None,
                 dead_letter_queue: str | None = None, **worker_options: Any) -> None:
        self.url = url
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.timeout_s = timeout
        self.max_attempts = max_attempts
        self.backoff = backoff if backoff is not None else ExponentialBackoff()
        self.headers = dict(headers or {})
        self._session: aiohttp.ClientSession | None = None
        self.worker = _DispatchWorker(self, client, queue, self.handle,
                                      concurrency=concurrency, max_attempts=max_attempts,
                                      dead_letter_queue=dead_letter_queue, **worker_options)

    def run(self) -> None:
        """Until SIGTERM/SIGINT (as ``Worker.run``)."""
        self.worker.run()

    async def serve(self) -> None:
        await self.worker.serve()

    def stop(self, force: bool = False) -> None:
        self.worker.stop(force)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def post(self, job) -> None:
        """One attempt: return on 2xx, else raise WebhookError."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        headers = {"Content-Type": content_type(job.raw), **self.headers,
                   "X-Disquette-Job-Id": job.id, "X-Disquette-Queue": job.queue,
                   "X-Disquette-Attempt": str(job.attempts)}
        try:
            async with self._session.post(self.url, data=job.raw, headers=headers) as r:
                text = await r.text(errors="replace")
                if 200 <= r.status < 300:
                    return
                raise WebhookError(self.url, r.status, text)
        except asyncio.TimeoutError:
            raise WebhookError(self.url, None, f"timeout after {self.timeout_s:g} s") from None
        except aiohttp.ClientError as e:
            raise WebhookError(self.url, None, f"{type(e).__name__}: {e}") from None

    async def handle(self, job) -> None:
        """The Worker's handler: an attempt, then the backoff before the
        Worker NACKs (none after the last attempt: the job goes to the
        dead-letter queue)."""
        try:
            await self.post(job)
        except WebhookError as e:
            if not self.max_attempts or job.attempts < self.max_attempts:
                delay = self.backoff.delay(job.attempts)
                log.info("job %s attempt %d failed (%s): next in %.1f s", job.id,
                         job.attempts, e, delay)
                await asyncio.sleep(delay)
            raise


class _DispatchWorker(Worker):
    """The Worker, closing the dispatcher's HTTP client when it stops."""

    def __init__(self, dispatcher: Dispatcher, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dispatcher = dispatcher

    async def serve(self) -> None:
        try:
            await super().serve()
        finally:
            await self.dispatcher.close()
