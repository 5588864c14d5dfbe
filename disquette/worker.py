"""The Worker: fetch jobs, run a handler on each, ack, retry, dead-letter.

    worker = Worker(client, queues=["emails"], handler=send_email, concurrency=16)
    worker.run()            # or: await worker.serve(); worker.stop() from anywhere

How a job goes through it:

* The fetch loop asks for at most as many jobs as there are free slots, plus
  ``prefetch`` (default 0) held in memory until a slot frees
  (``GETJOB COUNT n WITHCOUNTERS``, blocking ``poll_ms`` at a time).
* ``async def`` handlers run concurrently, each in a Task and a context of
  its own from its first ``await`` on; the jobs of one GETJOB start one after
  the other in one Task, so handlers that finish without waiting (and the
  start of the others, up to their first wait) cost no Task each.  ``def``
  handlers run in a thread pool of ``concurrency`` threads.  Success: the
  job is acked (acks are batched, one ACKJOB per node per loop turn).
* While a handler runs, the worker sends WORKING ``working_after`` seconds
  after it started and then every half RETRY, so a long job is not
  re-delivered.  When WORKING answers TOOLATE or NOJOB the job is no longer
  ours (someone else may have it): the handler gets :class:`LeaseLost` (an
  async handler at its current ``await``, a sync one from ``job.working()``
  and as ``job.lease_lost``) and the job is neither acked nor NACKed.
* Failure (the handler raised): ``on_failure`` hook, then the poison policy
  (``disquette.poison``): over ``max_failures`` (its nacks) or
  ``max_attempts`` (nacks + additional deliveries + 1) the job is added to
  the dead-letter queue (default ``<queue>:dead``) with the reason and
  acked; otherwise NACKed (queued again now), or with ``retry_backoff=True``
  left alone so that the broker re-queues it when its RETRY elapses.  A job
  that arrives with too many lost deliveries (``max_lost_deliveries``, or
  over ``max_attempts``: workers died on it) is dead-lettered without
  running it again.
* Shutdown (``stop()``, SIGTERM or SIGINT when ``run()`` is called in the main
  thread): stop fetching; jobs taken but not started go back at once with
  ENQUEUE (no failure counted); the jobs in flight get ``grace_period``
  seconds to finish, the rest are NACKed; acks are flushed.
  ``handed_back`` lists both.  A second signal (``stop(force=True)``) exits
  at once: unfinished jobs come back by RETRY.
* ``run_until_empty()`` (``serve_until_empty()``): for tests, serve until the
  queues are empty and nothing is in flight, then stop.
* With opentelemetry: ``deliver``, ``handle`` and ``ack`` spans
  (``disquette.tracing``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import signal
import sys
import threading
import time
import traceback
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Generator, Iterable

from .tracing import (
    current_context, end_ack, end_deliver, handle_span, start_ack, start_deliver, tracer_for,
)
from .aio import AsyncClient
from .commands import getjob_request, ids_request
from .dead_letters import dead_queue_name, envelope
from .backoff import Backoff
from .errors import DisqueConnectionError, DisqueError, LeaseLost, NoJobError, TooLateError
from .job import Job
from .metrics import WorkerMetrics
from .poison import PoisonPolicy, Verdict

log = logging.getLogger("disquette.worker")

# Python 3.12+ starts a Task at once (a batch of handlers that never wait
# then costs no turn of the event loop); 3.11 schedules it.
_EAGER_TASKS = sys.version_info >= (3, 12)
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

    def __init__(self, worker: "Worker", loop: asyncio.AbstractEventLoop) -> None:
        self._worker: Worker | None = worker
        self._client, self._loop = worker._aclient, loop

    def working(self, job_id: str, node: str | None = None) -> int:
        """A handler's own WORKING: a refusal means the lease is lost."""
        worker = self._worker
        if worker is None:  # the worker stopped: a plain WORKING
            return self.__getattr__("working")(job_id, node=node)
        call = asyncio.run_coroutine_threadsafe(worker._handler_working(job_id, node),
                                                self._loop)
        return call.result()

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
    __slots__ = ("job", "task", "started", "next_touch", "touching", "quiet", "abandoned",
                 "handling", "span", "held_until")

    def __init__(self, job: Job, started: float, first_touch: float) -> None:
        self.job = job
        self.task: asyncio.Task[None] | None = None  # its batch's, once started
        self.started = started
        self.next_touch = started + first_touch
        self.touching = False
        self.quiet = False       # no more WORKING (retry_backoff: RETRY re-queues it)
        self.abandoned = False   # the grace period is over: the worker NACKed it
        self.handling = False    # the handler runs now
        self.span: Any = None    # the deliver span, with tracing
        self.held_until = 0.0    # failed, kept until then with WORKING (a backoff), then NACKed


class _Resume:
    """Awaits a job's ``_process`` from its first wait on, in the Task that ran
    its first step (``_run_batch``), each step in the job's own context.  When
    that Task is cancelled because the lease was lost, the handler gets
    LeaseLost at its current ``await`` instead of a plain CancelledError."""

    __slots__ = ("coro", "job", "waiting", "context")

    def __init__(self, coro: Any, job: Job, waiting: Any,
                 context: contextvars.Context) -> None:
        self.coro, self.job, self.waiting, self.context = coro, job, waiting, context

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, job, pending, run = self.coro, self.job, self.waiting, self.context.run
        while True:
            try:
                sent, thrown = (yield pending), None
            except GeneratorExit:
                run(coro.close)
                raise
            except BaseException as e:  # the Task's cancellation, mostly
                sent, thrown = None, e
                if (job.lease_lost and isinstance(e, asyncio.CancelledError)
                        and not isinstance(e, LeaseLost)):
                    thrown = LeaseLost(job.id, "WORKING refused")
            try:
                pending = run(coro.send, sent) if thrown is None else run(coro.throw, thrown)
            except StopIteration as done:
                return done.value


class _Started:
    """The rest of a handler whose first step ran in ``_run_batch`` (the plain
    path): awaiting it raises what that step raised, or hands on what it
    waits for and drives it to its end, as ``await handler(job)`` would."""

    __slots__ = ("coro", "waiting", "error")

    def __init__(self, coro: Any, waiting: Any, error: BaseException | None) -> None:
        self.coro, self.waiting, self.error = coro, waiting, error

    def __await__(self) -> Generator[Any, Any, Any]:
        if self.error is not None:
            raise self.error
        coro, pending = self.coro, self.waiting
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # a cancellation: the handler's to handle
                try:
                    pending = coro.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as done:
                    return done.value


class Worker:
    """Runs ``handler(job)`` on the jobs of ``queues`` (see the module doc).

    ``client``: a :class:`~disquette.Client` (the worker makes an AsyncClient
    twin with the same options) or an :class:`~disquette.AsyncClient`.
    ``concurrency``: jobs handled at once.  ``prefetch``: jobs taken beyond
    the free slots, waiting in memory for one (0: none; they get no WORKING,
    keep it small next to RETRY).  Poison policy (``disquette.poison``, None:
    no limit): ``max_failures`` (handler failures, the job's nacks),
    ``max_lost_deliveries`` (deliveries that never answered, its
    additional-deliveries) and ``max_attempts`` (default 5: both together,
    nacks + additional deliveries + 1).  ``dead_letter_queue``: a name, or a
    function of the job's queue (default ``"<queue>:dead"``).
    ``retry_backoff``: on failure, let RETRY re-queue the job instead of
    NACKing it (the failure then counts as a lost delivery).  ``backoff``: a
    :class:`~disquette.Backoff` (or a function of the job returning one or
    None): a failed job is kept, with WORKING and out of the slots, for its
    delay, then NACKed (disquette/backoff.py).
    ``grace_period``: seconds in-flight jobs get at shutdown.
    ``poll_ms``: how long one GETJOB blocks.  ``working_after``: seconds a
    handler runs before the first WORKING.  ``fast_ack``: FASTACK instead of
    ACKJOB.  ``fetchers``: GETJOBs in flight at once (each for up to
    concurrency/fetchers jobs, never more than the free slots).  Hooks
    (sync or async): ``before_job(job)``, ``after_job(job, error_or_None)``,
    ``on_failure(job, error)``.
    ``metrics``: Prometheus counters (default: when prometheus-client is
    importable).  ``tracing``: OpenTelemetry spans (``disquette.tracing``;
    None: when a tracer provider is set).  ``stats`` counts outcomes (ok,
    failed, dead_lettered, returned, handed_back, lease_lost).
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
                 metrics: bool | None = None, max_failures: int | None = None,
                 max_lost_deliveries: int | None = None, prefetch: int = 0,
                 tracing: bool | None = None,
                 backoff: Backoff | Callable[[Job], Backoff | None] | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if prefetch < 0:
            raise ValueError("prefetch must be 0 or more")
        self.client = client
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues:
            raise ValueError("a Worker needs at least one queue")
        self.handler = handler
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.max_attempts = max_attempts
        self.policy = PoisonPolicy(max_attempts, max_failures, max_lost_deliveries)
        self.dead_letter_queue = dead_letter_queue
        self.retry_backoff = retry_backoff
        self.backoff = backoff
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
        self.tracing = tracing
        self.stats: Counter[str] = Counter()
        self.handed_back: dict[str, list[str]] = {"not_started": [], "unfinished": []}
        self._async_handler = _is_async(handler)
        self._stopping = False
        self._forced = False
        self._until_empty = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[None] | None = None
        self._inflight: dict[str, _Running] = {}
        self._held: dict[str, _Running] = {}  # failed, waiting out their backoff
        self._buffer: deque[Job] = deque()
        self._starting = False
        self._tracer: Any = None
        self._plain = False
        self._fast = False

    # -- public
    @property
    def in_flight(self) -> int:
        """Jobs being handled now."""
        return len(self._inflight)

    @property
    def buffered(self) -> int:
        """Jobs taken (``prefetch``) and waiting for a slot."""
        return len(self._buffer)

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
        self._run_loop(self._serve_with_signals())

    def run_until_empty(self, timeout: float | None = None) -> None:
        """For tests: serve until the queues are empty (on the worker's node)
        and nothing is in flight, then stop as ``stop()`` does and return.
        Jobs waiting for their DELAY or RETRY are not waited for (those kept
        for a ``backoff`` are).  Raises TimeoutError (after stopping) if that
        takes over ``timeout`` seconds."""
        self._run_loop(self.serve_until_empty(timeout))

    async def serve_until_empty(self, timeout: float | None = None) -> None:
        """``run_until_empty`` inside a running event loop."""
        self._until_empty = True
        serving = asyncio.ensure_future(self.serve())
        done, _ = await asyncio.wait([serving], timeout=timeout)
        if not done:
            self._request_stop(False)
            await serving
            raise TimeoutError(f"queues {self.queues} not empty after {timeout} s")
        serving.result()

    def _run_loop(self, main: Any) -> None:
        try:
            import uvloop  # optional: a dependency everywhere but on Windows

            factory: Any = uvloop.new_event_loop
        except ImportError:  # pragma: no cover
            factory = None
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main)

    @property
    def forced(self) -> bool:
        """True once a forced stop (second signal) ended the worker."""
        return self._forced

    async def serve(self) -> None:
        """Serve until ``stop()`` (see the module doc)."""
        self._loop = asyncio.get_running_loop()
        owned = not isinstance(self.client, AsyncClient)
        self._aclient = self.client.as_async() if owned else self.client
        self._bridge = _ThreadBridge(self, self._loop)
        self._executor = None if self._async_handler else ThreadPoolExecutor(
            self.concurrency, thread_name_prefix="disquette-worker")
        self._tracer = tracer_for(self.tracing)
        # An async handler, no spans: a job's start and end skip their checks
        # (the hot path, per job).
        self._plain = self._async_handler and self._tracer is None
        if self.metrics:  # counted per batch; its in-flight gauge read when scraped
            self.metrics.workers.add(self)
        # ...and no hooks either: a fresh job's handler starts without _process
        # (_run_batch), which comes in only if it waits or raises.
        self._fast = self._plain and self.before_job is None and self.after_job is None
        self._ack_links: dict[str, Any] = {}  # job id -> its deliver span's context
        self._slot_free = asyncio.Event()
        self._acks: dict[str, list[str]] = {}
        self._ack_wakeup = asyncio.Event()
        self._acks_closing = False
        self._fetching = 0  # fetch loops inside a GETJOB
        self._reserved = 0  # slots promised to the GETJOBs in flight
        self._force_event = asyncio.Event()
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self._batches: set[asyncio.Task[None]] = set()  # _run_batch Tasks, unfinished
        self._context = contextvars.copy_context()
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
        batch = -(-(self.concurrency + self.prefetch) // self.fetchers)
        room = self.concurrency + self.prefetch
        while not self._stopping:
            free = room - len(self._inflight) - len(self._buffer) - self._reserved
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
                await self._return_jobs(jobs)
                return
            if not jobs and self._until_empty:
                if not (self._inflight or self._buffer or self._fetching or self._held):
                    self._request_stop(False)  # nothing queued, nothing running: done
                    return
                self._slot_free.clear()  # something runs: look again when it ends
                await self._slot_free.wait()
                continue
            free = max(0, self.concurrency - len(self._inflight))
            if free and jobs:
                self._spawn_batch(self._admit_all(jobs[:free]))
            self._buffer.extend(jobs[free:])
            await asyncio.sleep(0)  # let finished handlers free their slots together

    async def _fetch(self, free: int) -> list[Job]:
        """GETJOB for ``free`` jobs; the acks waiting for the same node go in
        the same write (see ``_ack``)."""
        client = self._aclient
        get = getjob_request(tuple(self.queues), free, self.poll_ms, self._until_empty, True)
        node = client.node
        ids = self._acks.pop(node, None)
        if self._acks:  # for other nodes (the client moved): the ack loop's
            self._ack_wakeup.set()
        if not ids:
            return await client._run(get)
        command = "FASTACK" if self.fast_ack else "ACKJOB"
        span = self._ack_span(command, ids)
        acked, jobs = await client._ack_and_get(ids_request(command, (ids,)), get)
        if isinstance(acked, DisqueConnectionError):
            self._acks.setdefault(node, []).extend(ids)  # send them again
        elif isinstance(acked, Exception):
            log.error("ack of %d jobs refused: %s", len(ids), acked)
        if span is not None:
            end_ack(span, acked if isinstance(acked, Exception) else None)
        if isinstance(jobs, Exception):
            raise jobs
        return jobs

    async def _pause(self, seconds: float) -> None:
        self._slot_free.clear()
        try:
            await asyncio.wait_for(self._slot_free.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _admit_all(self, jobs: list[Job]) -> deque[_Running]:
        """``_admit`` for each job of a batch, with one clock read (and on the
        plain path, nothing else to do per job: no call each)."""
        now = time.monotonic()
        if not self._plain:
            return deque([self._admit(job, now) for job in jobs])
        first_touch, inflight = self.working_after, self._inflight
        runs = deque([_Running(job, now, first_touch) for job in jobs])
        for run in runs:
            inflight[run.job.id] = run
        return runs

    def _admit(self, job: Job, now: float) -> _Running:
        """A job given a slot: in flight from now on (its Task is _run_batch's)."""
        run = _Running(job, now, self.working_after)
        self._inflight[job.id] = run
        if not self._plain:
            if not self._async_handler:
                job._client = self._bridge
            if self._tracer is not None:
                run.span = start_deliver(self._tracer, job)
        return run

    def _spawn_batch(self, runs: deque[_Running]) -> None:
        """A Task that starts ``runs`` (see _run_batch), in a copy of the
        context serve() started in (not of a finished job's)."""
        coro = self._run_batch(runs)
        if _EAGER_TASKS:  # runs at once, until its first wait
            task = asyncio.Task(coro, loop=self._loop, context=self._context.copy(),
                                eager_start=True)
        else:
            task = self._loop.create_task(coro, context=self._context.copy())
        if not task.done():
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _run_batch(self, runs: deque[_Running]) -> None:
        """Starts jobs one after the other in this Task, each in a context of
        its own (a copy of this Task's, as its own Task would have).  A job
        that never waits (a no-op handler) runs through here entirely; the
        first job that waits keeps this Task as its own until it ends, and the
        jobs after it go on in a new one: a Task is never shared by handlers
        running at the same time, and a batch of handlers that do not wait
        costs one Task instead of one each (and one _succeeded)."""
        succeeded: list[_Running] = []
        fast, handler, inflight = self._fast, self.handler, self._inflight
        try:
            while runs:
                run = runs.popleft()
                context = contextvars.copy_context()
                job = run.job
                if fast and not (job.nacks or job.additional_deliveries):
                    # The plain path (async handler; no spans, gauges, hooks
                    # or poison check due): the handler's first step runs
                    # here, _process comes in only if it waits or raises.
                    coro = handler(job)
                    try:
                        waiting = context.run(coro.send, None)
                    except StopIteration:  # it ended: _process's end, inline
                        if inflight.get(job.id) is run:
                            del inflight[job.id]
                        if self._buffer:
                            self._start_buffered()
                        if job.lease_lost:
                            self._lease_lost(job)
                        elif not run.abandoned:
                            succeeded.append(run)
                        continue
                    except BaseException as e:  # _process reports it (without this frame)
                        e = e.with_traceback(e.__traceback__.tb_next if e.__traceback__ else None)
                        coro = self._process(run, _Started(coro, None, e))
                    else:
                        coro = self._process(run, _Started(coro, waiting, None))
                else:
                    coro = self._process(run)
                try:
                    waiting = context.run(coro.send, None)
                except StopIteration as end:
                    if end.value:
                        succeeded.append(run)
                    continue
                except BaseException:  # a CancelledError of its own, mostly
                    if runs:
                        self._spawn_batch(runs)
                    raise
                if runs:
                    self._spawn_batch(runs)
                if succeeded:
                    self._succeeded(succeeded)
                    succeeded = []
                self._slot_free.set()  # for the jobs that ended here
                run.task = asyncio.current_task()  # its own from now on
                if await _Resume(coro, run.job, waiting, context):
                    self._succeeded([run])
                return
        finally:
            if succeeded:
                self._succeeded(succeeded)
            self._slot_free.set()  # once for the batch, not once a job

    def _start_buffered(self) -> None:
        """Start prefetched jobs while slots are free (a loop, not recursion:
        a job that ends at once calls here again)."""
        if self._starting:
            return
        self._starting = True
        try:
            now = time.monotonic()
            runs: deque[_Running] = deque()
            while (self._buffer and not self._stopping
                   and len(self._inflight) < self.concurrency):
                runs.append(self._admit(self._buffer.popleft(), now))
            if runs:
                self._spawn_batch(runs)
        finally:
            self._starting = False

    # -- one job
    async def _process(self, run: _Running, started: _Started | None = None) -> bool:
        """Handles a job to its end but for the ack of a success: True then
        (_run_batch acks the jobs of a batch that succeeded together).
        ``started``: the handler's first step already ran (in _run_batch)."""
        job = run.job
        error: BaseException | None = None
        outcome = "ok"
        try:
            if job.nacks or job.additional_deliveries:  # a fresh job is over no limit
                verdict = self.policy.on_delivery(job)
                if verdict is not None:
                    outcome = await self._dead_letter(run, RuntimeError(verdict.message),
                                                      None, verdict)
                    return False
            if self.before_job is not None:
                await _call_hook(self.before_job, job)
            try:
                if started is not None:  # (a fresh job, no hooks: nothing above ran)
                    run.handling = True
                    try:
                        await started
                    finally:
                        run.handling = False
                elif self._tracer is not None:
                    await self._handle_traced(run)
                elif self._async_handler:  # _handle, inline
                    run.handling = True
                    try:
                        await self.handler(job)
                    finally:
                        run.handling = False
                else:
                    await self._handle(run)
            except asyncio.CancelledError as exc:
                if not job.lease_lost:
                    raise
                error, outcome = exc, self._lease_lost(job)
            except Exception as exc:
                error = exc
                if job.lease_lost:
                    outcome = self._lease_lost(job)
                elif run.abandoned:
                    outcome = "handed_back"
                else:
                    outcome = await self._failed(run, exc, traceback.format_exc())
            else:
                if job.lease_lost:  # it finished, but it is no longer ours to ack
                    outcome = self._lease_lost(job)
                elif run.abandoned:
                    outcome = "handed_back"
            if self.after_job is not None:
                await _call_hook(self.after_job, job, error)
            return outcome == "ok"
        finally:
            # its slot (_run_batch sets _slot_free); unless a delivery of the
            # same job that came back while this one ran has taken the entry
            if self._inflight.get(job.id) is run:
                del self._inflight[job.id]
            if self._buffer:
                self._start_buffered()
            if not self._plain and run.span is not None:
                end_deliver(run.span, outcome)

    async def _handle(self, run: _Running) -> None:
        job = run.job
        run.handling = True  # a lost lease cancels the Task only in here
        try:
            if self._async_handler:
                await self.handler(job)
            else:
                await self._loop.run_in_executor(self._executor, self.handler, job)
        finally:
            run.handling = False

    async def _handle_traced(self, run: _Running) -> None:
        job = run.job
        with handle_span(self._tracer, run.span, job):
            if self._async_handler:
                await self._handle(run)
            else:  # the thread runs in this context: the handle span is current there
                context = contextvars.copy_context()
                run.handling = True
                try:
                    await self._loop.run_in_executor(self._executor, context.run,
                                                     self.handler, job)
                finally:
                    run.handling = False

    def _finished(self, job: Job, outcome: str, run: _Running | None = None) -> None:
        self.stats[outcome] += 1
        if self.metrics:
            self.metrics.finished(job.queue, outcome,
                                  time.monotonic() - run.started if run else None)

    def _lease_lost(self, job: Job) -> str:
        log.warning("job %s (queue %s): lease lost, neither acked nor NACKed", job.id,
                    job.queue)
        self._finished(job, "lease_lost")
        return "lease_lost"

    async def _failed(self, run: _Running, exc: BaseException, tb: str) -> str:
        job = run.job
        self._finished(job, "failed", run)
        log.warning("job %s (queue %s, attempt %d) failed: %r", job.id, job.queue,
                    job.attempts, exc)
        await _call_hook(self.on_failure, job, exc)
        verdict = self.policy.after_failure(job, exc)
        if verdict is not None:
            return await self._dead_letter(run, exc, tb, verdict)
        backoff = self.backoff(job) if callable(self.backoff) else self.backoff
        if backoff is not None and not job.lease_lost and not run.abandoned:
            delay = backoff.delay(job.attempts)
            if delay > 0:
                self._hold(run, delay)
                return "failed"
        if self.retry_backoff:
            run.quiet = True  # no more WORKING: RETRY re-queues it
        else:
            await self._nack([job])
        return "failed"

    def _hold(self, run: _Running, delay: float) -> None:
        """A failed job kept for ``delay`` seconds (WORKING meanwhile, by the
        keepalive loop, out of the slots), then NACKed: see backoff.py."""
        run.held_until = time.monotonic() + delay
        self._held[run.job.id] = run

    async def _dead_letter(self, run: _Running, error: BaseException, tb: str | None,
                           verdict: Verdict) -> str:
        job = run.job
        dlq = self.dead_queue_for(job.queue)
        body = envelope(job, error, tb, time.time(), verdict.reason, verdict.limit)
        try:
            if run.span is not None:
                with current_context(run.span):
                    await self._aclient.add_job(dlq, body, ttl=self.dead_letter_ttl)
            else:
                await self._aclient.add_job(dlq, body, ttl=self.dead_letter_ttl)
        except DisqueError as e:
            log.error("could not add job %s to dead-letter queue %s (%s); NACKing it",
                      job.id, dlq, e)
            await self._nack([job])
            return "failed"
        log.error("job %s (queue %s) dead-lettered to %s (%s, %s) after %d attempts: %s",
                  job.id, job.queue, dlq, verdict.reason, verdict.limit, job.attempts, error)
        self._ack(job, run)
        self._finished(job, "dead_lettered")
        return "dead_lettered"

    async def _nack(self, jobs: list[Job]) -> None:
        for node, ids in _by_node(jobs).items():
            try:
                await self._aclient.nack_job(*ids, node=node)
            except DisqueError as e:
                log.warning("NACK of %d jobs failed (%s): they come back after RETRY",
                            len(ids), e)

    async def _return_jobs(self, jobs: list[Job]) -> None:
        """Jobs taken but never started go back to their queue with ENQUEUE:
        no failure counted (their next delivery counts as an additional one,
        as Disque counts every requeue that is not a NACK)."""
        if not jobs:
            return
        self.handed_back["not_started"].extend(j.id for j in jobs)
        for job in jobs:
            self._finished(job, "returned")
            if self._tracer is not None:  # never started: a deliver span of its own
                end_deliver(start_deliver(self._tracer, job), "returned")
        for node, ids in _by_node(jobs).items():
            try:
                await self._aclient.enqueue(*ids, node=node)
            except DisqueError as e:
                log.warning("ENQUEUE of %d jobs not started failed (%s): they come back "
                            "after RETRY", len(ids), e)

    async def _return_buffered(self) -> None:
        jobs = list(self._buffer)
        self._buffer.clear()
        await self._return_jobs(jobs)

    # -- acks
    def _succeeded(self, runs: list[_Running]) -> None:
        """Jobs whose handler succeeded: acked (see _ack) and counted ok."""
        if not self._plain:  # spans to link, durations to observe
            for run in runs:
                self._ack(run.job, run)
                self._finished(run.job, "ok", run)
            return
        node, ids = None, []
        for run in runs:
            job = run.job
            if job.node != node:  # a batch's jobs come from one node, mostly
                node = job.node
                ids = self._acks.setdefault(job.node, [])
            ids.append(job.id)
        if self._fetching == self.fetchers or self._stopping:
            self._ack_wakeup.set()
        self.stats["ok"] += len(runs)
        if self.metrics:
            self.metrics.succeeded(runs, time.monotonic())

    def _ack(self, job: Job, run: _Running) -> None:
        """Acks wait for the next GETJOB, which carries those for its node (no
        round trip of their own) and hands the others to the ack loop; the ack
        loop sends them at once when no GETJOB is coming soon (every fetch
        loop is in one).  Per job: no more than appending the id."""
        waiting = self._acks.get(job.node)
        if waiting is None:
            self._acks[job.node] = [job.id]
        else:
            waiting.append(job.id)
        if run.span is not None:
            self._ack_links[job.id] = run.span.get_span_context()
        if self._fetching == self.fetchers or self._stopping:
            self._ack_wakeup.set()

    def _ack_span(self, command: str, ids: list[str]) -> Any:
        if self._tracer is None:
            return None
        links = [ctx for ctx in map(self._ack_links.pop, ids, [None] * len(ids)) if ctx]
        return start_ack(self._tracer, command, links)

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
            span = self._ack_span("FASTACK" if self.fast_ack else "ACKJOB", ids)
            error: BaseException | None = None
            try:
                await send(*ids, node=node)
            except DisqueConnectionError as e:
                ok, error = False, e
                log.warning("ack of %d jobs failed (%s)%s", len(ids), e,
                            "; retrying" if keep_failed else ": they come back after RETRY")
                if keep_failed:
                    self._acks.setdefault(node, []).extend(ids)
                    self._ack_wakeup.set()
            except DisqueError as e:
                error = e
                log.error("ack of %d jobs refused: %s", len(ids), e)
            if span is not None:
                end_ack(span, error)
        return ok

    # -- WORKING
    async def _keepalive_loop(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_TICK)
            now = time.monotonic()
            for run in list(self._inflight.values()):
                if run.next_touch <= now and not (run.touching or run.quiet or run.abandoned
                                                  or run.job.lease_lost):
                    run.touching = True
                    self._spawn(self._touch(run))
            if self._held:
                self._keep_held(now)

    def _keep_held(self, now: float) -> None:
        """Failed jobs in their backoff: NACKed once it is over, kept with
        WORKING until then (dropped if the lease is lost: RETRY brings them
        back)."""
        due = []
        for job_id, run in list(self._held.items()):
            if run.job.lease_lost:
                del self._held[job_id]
            elif run.held_until <= now:
                if not run.touching:
                    del self._held[job_id]
                    due.append(run.job)
            elif run.next_touch <= now and not run.touching:
                run.touching = True
                self._spawn(self._touch(run))
        if due:
            self._spawn(self._nack_held(due))

    async def _nack_held(self, jobs: list[Job]) -> None:
        await self._nack(jobs)
        self._slot_free.set()  # run_until_empty: they are queued again, look again

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
            self._lose_lease(run, e)
        except DisqueError as e:
            run.next_touch = time.monotonic() + 0.2
            log.warning("job %s: WORKING failed (%s)", job.id, e)
        finally:
            run.touching = False

    def _lose_lease(self, run: _Running, reply: BaseException) -> None:
        """WORKING was refused: the job may be someone else's now.  An async
        handler is cancelled (with LeaseLost, see _Resume); a sync one sees
        ``job.lease_lost`` and LeaseLost from ``job.working()``."""
        job = run.job
        if job.lease_lost:
            return
        job.lease_lost = True
        log.warning("job %s: WORKING refused (%s): lease lost", job.id, reply)
        if self._async_handler and run.handling and run.task is not None and not run.abandoned:
            run.task.cancel()

    async def _handler_working(self, job_id: str, node: str | None) -> int:
        """WORKING asked by a ``def`` handler (``job.working()``)."""
        run = self._inflight.get(job_id)
        try:
            return await self._aclient.working(job_id, node=node)
        except (TooLateError, NoJobError) as e:
            if run is not None:
                self._lose_lease(run, e)
            raise LeaseLost(job_id, str(e)) from e

    # -- stopping
    def _request_stop(self, force: bool) -> None:
        if not self._stopping:
            self._stopping = True
            if self._buffer:
                self._spawn(self._return_buffered())  # not started: back at once
        self._slot_free.set()
        self._ack_wakeup.set()
        if force and not self._forced:
            self._forced = True
            self._force_event.set()
            if self._main is not None:
                self._main.cancel()

    async def _drain(self) -> None:
        """Let the jobs in flight finish for up to grace_period; NACK the rest
        (and at once the failed jobs waiting out a backoff)."""
        if self._held:
            held = [r.job for r in self._held.values() if not r.job.lease_lost]
            self._held.clear()
            await self._nack(held)
        if self._inflight:
            log.info("stopping: waiting up to %.1f s for %d jobs", self.grace_period,
                     len(self._inflight))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.grace_period
            # Again while time is left: a batch's Task hands the jobs after one
            # that waits to a new Task.
            while self._batches and (left := deadline - loop.time()) > 0:
                await asyncio.wait(set(self._batches), timeout=left)
        late = list(self._inflight.values())
        for run in late:
            run.abandoned = True
        for task in list(self._batches):
            task.cancel()
        unfinished = [r.job for r in late if not r.job.lease_lost]
        if unfinished:
            log.warning("grace period over: handing back %d unfinished jobs", len(unfinished))
            self.handed_back["unfinished"].extend(j.id for j in unfinished)
            await self._nack(unfinished)
            for job in unfinished:
                self._finished(job, "handed_back")
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
        tasks = [acker, keeper, *self._side_tasks, *self._batches]
        for t in tasks:
            t.cancel()
        # Bounded: a task cancelled inside a redis-py call may not notice.
        await asyncio.wait(tasks, timeout=SHUTDOWN_WAIT)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self.metrics:
            self.metrics.workers.discard(self)
        if owned:
            await self._aclient.aclose()
        # The bridge refers back to the worker: break the cycle, so that the
        # connections are freed now rather than by a later garbage collection.
        self._bridge._worker = None
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


def _by_node(jobs: list[Job]) -> dict[str | None, list[str]]:
    by_node: dict[str | None, list[str]] = {}
    for job in jobs:
        by_node.setdefault(job.node, []).append(job.id)
    return by_node
