"""The Worker: fetch jobs, run a handler on each, ack, retry, dead-letter.

    worker = Worker(client, queues=["emails"], handler=send_email, concurrency=16)
    worker.run()            # or: await worker.serve(); worker.stop() from anywhere

How a job goes through it:

* The fetch loop asks for at most as many jobs as there are free slots
  (``GETJOB COUNT free WITHCOUNTERS``, blocking ``poll_ms`` at a time), so no
  job ever waits in the worker's memory.
* ``async def`` handlers run as tasks; ``def`` handlers in a thread pool of
  ``concurrency`` threads.  Success: the job is acked (acks are batched, one
  ACKJOB per node per loop turn).
* While a handler runs, the worker sends WORKING ``working_after`` seconds
  after it started and then every half RETRY, so a long job is not
  re-delivered; it stops when the node answers TOOLATE (half the TTL gone).
* Failure (the handler raised): ``on_failure`` hook, then, if this was
  delivery number ``max_attempts`` (nacks + additional deliveries + 1), the
  job is added to the dead-letter queue (default ``<queue>:dead``) with the
  error and acked; otherwise NACKed (queued again now), or with
  ``retry_backoff=True`` left alone so that the broker re-queues it when its
  RETRY elapses (a delay without any broker extension).  A job delivered more
  than ``max_attempts`` times without finishing (workers that died on it) is
  dead-lettered without running it again.
* Shutdown (``stop()``, SIGTERM or SIGINT when ``run()`` is called in the main
  thread): stop fetching, let the jobs in flight finish for up to
  ``grace_period`` seconds, NACK the rest, flush the acks.  A second signal
  (``stop(force=True)``) exits at once: unfinished jobs come back by RETRY.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from .aio import AsyncClient
from .commands import getjob_request, ids_request
from .dead_letters import dead_queue_name, envelope
from .errors import DisqueConnectionError, DisqueError, NoJobError, TooLateError
from .job import Job
from .metrics import WorkerMetrics

log = logging.getLogger("disquette.worker")

KEEPALIVE_TICK = 0.1   # seconds between looks at the running jobs
ACK_RETRY_DELAY = 0.5  # seconds before acks that failed are sent again
FETCH_ERROR_DELAY = 0.5
SHUTDOWN_WAIT = 2.0    # seconds the last acks and cancelled tasks get at exit


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


async def _call_hook(hook: Callable[..., Any] | None, *args: Any) -> None:
    """Hooks may be sync or async; their errors are logged, never fatal."""
    if hook is None:
        return
    try:
        result = hook(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("hook %r failed", hook)


class _ThreadBridge:
    """What a job handed to a ``def`` handler uses as its client: the
    worker's AsyncClient, called from the handler's thread (``job.working()``
    blocks that thread until the event loop has the answer)."""

    def __init__(self, client: AsyncClient, loop: asyncio.AbstractEventLoop) -> None:
        self._client, self._loop = client, loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if inspect.isawaitable(result):
                return asyncio.run_coroutine_threadsafe(result, self._loop).result()
            return result

        return call


class _Running:
    __slots__ = ("job", "task", "started", "next_touch", "touching", "too_late", "abandoned")

    def __init__(self, job: Job, started: float, first_touch: float) -> None:
        self.job = job
        self.task: asyncio.Task[None] | None = None
        self.started = started
        self.next_touch = started + first_touch
        self.touching = False
        self.too_late = False
        self.abandoned = False


class Worker:
    """Runs ``handler(job)`` on the jobs of ``queues`` (see the module doc).

    ``client``: a :class:`~disquette.Client` (the worker makes an AsyncClient
    twin with the same options) or an :class:`~disquette.AsyncClient`.
    ``concurrency``: jobs handled at once.  ``max_attempts``: deliveries
    before dead-lettering (None: never).  ``dead_letter_queue``: a name, or a
    function of the job's queue (default ``"<queue>:dead"``).
    ``retry_backoff``: on failure, let RETRY re-queue the job instead of
    NACKing it.  ``grace_period``: seconds in-flight jobs get at shutdown.
    ``poll_ms``: how long one GETJOB blocks.  ``working_after``: seconds a
    handler runs before the first WORKING.  ``fast_ack``: FASTACK instead of
    ACKJOB.  ``fetchers``: GETJOBs in flight at once (each for up to
    concurrency/fetchers jobs, never more than the free slots).  Hooks
    (sync or async): ``before_job(job)``, ``after_job(job, error_or_None)``,
    ``on_failure(job, error)``.
    ``metrics``: Prometheus counters (default: when prometheus-client is
    importable).  ``stats`` counts outcomes (ok, failed, dead_lettered,
    handed_back).
    """

    def __init__(self, client: Any, queues: str | Iterable[str],
                 handler: Callable[[Job], Any], *, concurrency: int = 16,
                 max_attempts: int | None = 5,
                 dead_letter_queue: str | Callable[[str], str] | None = None,
                 retry_backoff: bool = False, grace_period: float = 30.0, poll_ms: int = 1000,
                 working_after: float = 0.5, fast_ack: bool = False, fetchers: int = 2,
                 dead_letter_ttl: int = 7 * 86400,
                 before_job: Callable[..., Any] | None = None,
                 after_job: Callable[..., Any] | None = None,
                 on_failure: Callable[..., Any] | None = None,
                 metrics: bool | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues:
            raise ValueError("a Worker needs at least one queue")
        self.handler = handler
        self.concurrency = concurrency
        self.max_attempts = max_attempts
        self.dead_letter_queue = dead_letter_queue
        self.retry_backoff = retry_backoff
        self.grace_period = grace_period
        self.poll_ms = poll_ms
        self.working_after = working_after
        self.fast_ack = fast_ack
        self.fetchers = max(1, min(fetchers, concurrency))
        self.dead_letter_ttl = dead_letter_ttl
        self.before_job, self.after_job, self.on_failure = before_job, after_job, on_failure
        self.metrics = WorkerMetrics.get() if metrics is None or metrics else None
        if metrics and self.metrics is None:
            raise RuntimeError("metrics=True needs prometheus-client installed")
        self.stats: Counter[str] = Counter()
        self._async_handler = _is_async(handler)
        self._stopping = False
        self._forced = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._inflight: dict[str, _Running] = {}

    # -- public
    @property
    def in_flight(self) -> int:
        """Jobs being handled now."""
        return len(self._inflight)

    @property
    def aclient(self) -> AsyncClient:
        """The AsyncClient the worker talks through (while serving)."""
        return self._aclient

    def dead_queue_for(self, queue: str) -> str:
        dlq = self.dead_letter_queue
        if dlq is None:
            return dead_queue_name(queue)
        return dlq(queue) if callable(dlq) else dlq

    def stop(self, force: bool = False) -> None:
        """End ``serve()``/``run()``: gracefully, or at once with ``force``.
        Safe from any thread and from signal handlers."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._stopping = True
            self._forced = self._forced or force
            return
        try:
            loop.call_soon_threadsafe(self._request_stop, force)
        except RuntimeError:  # the loop just closed: nothing left to stop
            pass

    def run(self) -> None:
        """Serve until stopped, in a new event loop (uvloop when available).
        In the main thread, SIGTERM and SIGINT stop it gracefully; a second
        signal exits at once."""
        try:
            import uvloop  # optional: a dependency everywhere but on Windows

            factory: Any = uvloop.new_event_loop
        except ImportError:  # pragma: no cover
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(self._serve_with_signals())

    @property
    def forced(self) -> bool:
        """True once a forced stop (second signal) ended the worker."""
        return self._forced

    async def serve(self) -> None:
        """Serve until ``stop()`` (see the module doc)."""
        self._loop = asyncio.get_running_loop()
        owned = not isinstance(self.client, AsyncClient)
        self._aclient = self.client.as_async() if owned else self.client
        self._bridge = _ThreadBridge(self._aclient, self._loop)
        self._executor = None if self._async_handler else ThreadPoolExecutor(
            self.concurrency, thread_name_prefix="disquette-worker")
        self._slot_free = asyncio.Event()
        self._acks: dict[str, list[str]] = {}
        self._ack_wakeup = asyncio.Event()
        self._acks_closing = False
        self._fetching = 0  # fetch loops inside a GETJOB
        self._reserved = 0  # slots promised to the GETJOBs in flight
        self._force_event = asyncio.Event()
        self._side_tasks: set[asyncio.Task[Any]] = set()
        acker = asyncio.create_task(self._ack_loop())
        keeper = asyncio.create_task(self._keepalive_loop())
        log.info("worker started: queues %s, concurrency %d, node %s", self.queues,
                 self.concurrency, self._aclient.node)
        try:
            for step in (self._fetch_loops, self._drain):
                if self._forced:
                    break
                self._main = asyncio.create_task(step())
                # A forced stop does not wait for the step to notice its
                # cancellation (redis-py's asyncio client can swallow one).
                forced = asyncio.create_task(self._force_event.wait())
                await asyncio.wait([self._main, forced], return_when=asyncio.FIRST_COMPLETED)
                forced.cancel()
                if self._main.done() and not self._main.cancelled():
                    self._main.result()  # a bug of ours: raise it
        finally:
            await self._shutdown(acker, keeper, owned)

    # -- fetching
    async def _fetch_loops(self) -> None:
        """``fetchers`` loops, so that one GETJOB travels while the jobs of
        another are handled; each reserves its slots before asking."""
        await asyncio.gather(*(self._fetch_loop() for _ in range(self.fetchers)))

    async def _fetch_loop(self) -> None:
        batch = -(-self.concurrency // self.fetchers)
        while not self._stopping:
            free = self.concurrency - len(self._inflight) - self._reserved
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            count = min(free, batch)
            self._reserved += count
            self._fetching += 1
            try:
                jobs = await self._fetch(count)
            except DisqueError as e:
                log.warning("GETJOB failed: %s", e)
                await self._pause(FETCH_ERROR_DELAY)
                continue
            finally:
                self._fetching -= 1
                self._reserved -= count
            if self._stopping:
                await self._hand_back(jobs)
                return
            for job in jobs:
                self._start(job)
            await asyncio.sleep(0)  # let finished handlers free their slots together

    async def _fetch(self, free: int) -> list[Job]:
        """GETJOB for ``free`` jobs; the acks waiting for the same node go in
        the same write (see ``_ack``)."""
        client = self._aclient
        get = getjob_request(tuple(self.queues), free, self.poll_ms, False, True)
        node = client.node
        ids = self._acks.pop(node, None)
        if not ids:
            return await client._run(get)
        acked, jobs = await client._ack_and_get(
            ids_request("FASTACK" if self.fast_ack else "ACKJOB", (ids,)), get)
        if isinstance(acked, DisqueConnectionError):
            self._acks.setdefault(node, []).extend(ids)  # send them again
        elif isinstance(acked, Exception):
            log.error("ack of %d jobs refused: %s", len(ids), acked)
        if isinstance(jobs, Exception):
            raise jobs
        return jobs

    async def _pause(self, seconds: float) -> None:
        self._slot_free.clear()
        try:
            await asyncio.wait_for(self._slot_free.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _start(self, job: Job) -> None:
        run = _Running(job, time.monotonic(), self.working_after)
        self._inflight[job.id] = run
        if not self._async_handler:
            job._client = self._bridge
        run.task = asyncio.create_task(self._process(run))
        if self.metrics:
            self.metrics.in_flight.inc()

    # -- one job
    async def _process(self, run: _Running) -> None:
        job = run.job
        error: BaseException | None = None
        try:
            if self.max_attempts and job.attempts > self.max_attempts:
                error = RuntimeError(f"delivered {job.attempts} times without finishing "
                                     f"(max_attempts {self.max_attempts})")
                await self._dead_letter(job, error, None)
                return
            if self.before_job is not None:
                await _call_hook(self.before_job, job)
            try:
                if self._async_handler:
                    await self.handler(job)
                else:
                    await self._loop.run_in_executor(self._executor, self.handler, job)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                error = exc
                if not run.abandoned:
                    await self._failed(run, exc, traceback.format_exc())
            else:
                if not run.abandoned:
                    self._ack(job)
                    self._finished(job, "ok", run)
            if self.after_job is not None:
                await _call_hook(self.after_job, job, error)
        finally:
            del self._inflight[job.id]
            self._slot_free.set()
            if self.metrics:
                self.metrics.in_flight.dec()

    def _finished(self, job: Job, outcome: str, run: _Running | None = None) -> None:
        self.stats[outcome] += 1
        if self.metrics:
            self.metrics.finished(job.queue, outcome,
                                  time.monotonic() - run.started if run else None)

    async def _failed(self, run: _Running, exc: BaseException, tb: str) -> None:
        job = run.job
        self._finished(job, "failed", run)
        log.warning("job %s (queue %s, attempt %d) failed: %r", job.id, job.queue,
                    job.attempts, exc)
        await _call_hook(self.on_failure, job, exc)
        if self.max_attempts and job.attempts >= self.max_attempts:
            await self._dead_letter(job, exc, tb)
        elif self.retry_backoff:
            run.too_late = True  # no more WORKING: RETRY re-queues it
        else:
            await self._nack([job])

    async def _dead_letter(self, job: Job, error: BaseException, tb: str | None) -> None:
        dlq = self.dead_queue_for(job.queue)
        try:
            await self._aclient.add_job(dlq, envelope(job, error, tb, time.time()),
                                        ttl=self.dead_letter_ttl)
        except DisqueError as e:
            log.error("could not add job %s to dead-letter queue %s (%s); NACKing it",
                      job.id, dlq, e)
            await self._nack([job])
            return
        log.error("job %s (queue %s) dead-lettered to %s after %d attempts: %s", job.id,
                  job.queue, dlq, job.attempts, error)
        self._ack(job)
        self._finished(job, "dead_lettered")

    async def _nack(self, jobs: list[Job]) -> None:
        by_node: dict[str | None, list[str]] = {}
        for job in jobs:
            by_node.setdefault(job.node, []).append(job.id)
        for node, ids in by_node.items():
            try:
                await self._aclient.nack_job(*ids, node=node)
            except DisqueError as e:
                log.warning("NACK of %d jobs failed (%s): they come back after RETRY",
                            len(ids), e)

    async def _hand_back(self, jobs: list[Job]) -> None:
        if jobs:
            await self._nack(jobs)
            for job in jobs:
                self._finished(job, "handed_back")

    # -- acks
    def _ack(self, job: Job) -> None:
        """Acks wait for the next GETJOB to the same node, which carries them
        (no round trip of their own); the ack loop sends them when no GETJOB
        is coming soon: every fetch loop is in one, or they are for another node."""
        self._acks.setdefault(job.node, []).append(job.id)
        if (self._fetching == self.fetchers or self._stopping
                or job.node != self._aclient.node):
            self._ack_wakeup.set()

    async def _ack_loop(self) -> None:
        while not self._acks_closing:
            await self._ack_wakeup.wait()
            self._ack_wakeup.clear()
            if self._acks_closing:
                return
            if not await self._flush_acks():
                await asyncio.sleep(ACK_RETRY_DELAY)

    async def _flush_acks(self, keep_failed: bool = True) -> bool:
        pending, self._acks = self._acks, {}
        send = self._aclient.fast_ack if self.fast_ack else self._aclient.ack_job
        ok = True
        for node, ids in pending.items():
            try:
                await send(*ids, node=node)
            except DisqueConnectionError as e:
                ok = False
                log.warning("ack of %d jobs failed (%s)%s", len(ids), e,
                            "; retrying" if keep_failed else ": they come back after RETRY")
                if keep_failed:
                    self._acks.setdefault(node, []).extend(ids)
                    self._ack_wakeup.set()
            except DisqueError as e:
                log.error("ack of %d jobs refused: %s", len(ids), e)
        return ok

    # -- WORKING
    async def _keepalive_loop(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_TICK)
            now = time.monotonic()
            for run in list(self._inflight.values()):
                if run.next_touch <= now and not (run.touching or run.too_late or run.abandoned):
                    run.touching = True
                    self._spawn(self._touch(run))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def _touch(self, run: _Running) -> None:
        job = run.job
        try:
            retry = await self._aclient.working(job.id, node=job.node)
            run.next_touch = time.monotonic() + max(0.2, min(retry / 2, retry - 0.5))
        except (TooLateError, NoJobError) as e:
            run.too_late = True
            log.warning("job %s: WORKING refused (%s); it may be delivered again", job.id, e)
        except DisqueError as e:
            run.next_touch = time.monotonic() + 0.2
            log.warning("job %s: WORKING failed (%s)", job.id, e)
        finally:
            run.touching = False

    # -- stopping
    def _request_stop(self, force: bool) -> None:
        self._stopping = True
        self._slot_free.set()
        self._ack_wakeup.set()
        if force and not self._forced:
            self._forced = True
            self._force_event.set()
            if self._main is not None:
                self._main.cancel()

    async def _drain(self) -> None:
        """Let the jobs in flight finish for up to grace_period; NACK the rest."""
        running = [r for r in self._inflight.values() if r.task is not None]
        if running:
            log.info("stopping: waiting up to %.1f s for %d jobs", self.grace_period,
                     len(running))
            await asyncio.wait([r.task for r in running], timeout=self.grace_period)
        late = [r for r in self._inflight.values() if r.task is not None]
        for run in late:
            run.abandoned = True
            run.task.cancel()
        if late:
            log.warning("grace period over: handing back %d unfinished jobs", len(late))
            await self._hand_back([r.job for r in late])
        if self._side_tasks:
            await asyncio.wait(list(self._side_tasks), timeout=5.0)
        self._acks_closing = True  # the ack loop ends after its current flush
        self._ack_wakeup.set()
        await self._flush_acks(keep_failed=False)

    async def _shutdown(self, acker: asyncio.Task[Any], keeper: asyncio.Task[Any],
                        owned: bool) -> None:
        self._acks_closing = True
        self._ack_wakeup.set()
        if not self._forced:
            await asyncio.wait([acker], timeout=SHUTDOWN_WAIT)
        tasks = [acker, keeper, *self._side_tasks,
                 *(r.task for r in self._inflight.values() if r.task is not None)]
        for t in tasks:
            t.cancel()
        # Bounded: a task cancelled inside a redis-py call may not notice.
        await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if owned:
            await self._aclient.aclose()
        log.info("worker stopped%s: %s", " (forced)" if self._forced else "", dict(self.stats))

    async def _serve_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        signals = (signal.SIGTERM, signal.SIGINT)
        main = threading.current_thread() is threading.main_thread()
        if main:
            for sig in signals:
                loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.serve()
        finally:
            if main:
                for sig in signals:
                    loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self._stopping:
            log.warning("%s again: exiting now", name)
            self._request_stop(force=True)
        else:
            log.warning("%s: stopping (grace period %.0f s; %s again exits at once)", name,
                        self.grace_period, name)
            self._request_stop(force=False)
