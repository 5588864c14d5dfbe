"""Many kinds of job in one app: ``App``, ``@app.job``, ``@app.periodic``.

    app = disquette.App(client)

    @app.job("emails", retry=60, backoff=disquette.Backoff(base=1, cap=300))
    def send_email(to, subject=""):
        ...

    send_email.enqueue(42, subject="hi")          # a job on queue "emails"
    send_email.with_options(delay=10, timeout=30).enqueue(43)
    app.run()                                     # or: disquette worker myapp:app

A task's job carries the call in its body, through the client's serializer:
``[args, kwargs, options]`` (trailing empty parts left out, so a call without
arguments is ``[]``), ``options`` holding what ``.with_options`` gave that
the worker needs (``timeout``, ``backoff``), the route of its result
(``results``) and a periodic job's tick.  A body that is not such a list
(another producer's job) is passed to the function as its one argument.

The worker runs every registered queue in one :class:`~disquette.Worker`
whose handler looks up the task by the job's queue: ``async def`` functions
run on the event loop, ``def`` ones in a thread pool of ``concurrency``
threads.  Per task (nearest wins: ``.with_options``, then ``@app.job``, then
``App``): ``timeout`` (time limit, disquette.JobTimeout), ``backoff``
(disquette/backoff.py), ``max_running`` (disquette/limits.py), ``results``
(disquette/results.py).  A task that uses none of them costs a dict look-up
and a call more than a plain Worker's handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Callable, Iterable

from .aio import AsyncClient
from .backoff import Backoff
from .errors import JobTimeout
from .job import Job
from .limits import Limiter
from .periodic import Schedule, schedule_loop
from .results import EnqueuedJob, Replies, error_reply, ok_reply, send_result
from .worker import Worker

log = logging.getLogger("disquette.app")

# ADDJOB's options a task or a call may set (client.add_job's names).
ADD_OPTIONS = ("delay", "retry", "ttl", "replicate", "maxlen", "timeout_ms", "asynchronous",
               "idempotency_key")
# What the worker reads from the body (set by .with_options or the producer).
RUN_OPTIONS = ("timeout", "backoff", "results")
PERIODIC_TTL_MIN = 3600

_current_job: contextvars.ContextVar[Job | None] = contextvars.ContextVar(
    "disquette_current_job", default=None)


def current_job() -> Job | None:
    """The :class:`~disquette.Job` the calling task function runs for (its
    ``id``, ``attempts``, ``node``...), or None outside one.

    A task with a time limit, a limit or results, and every ``def`` one,
    sets it in the job's context (a ContextVar, so tasks the function starts
    see it too).  The others, the hot path, set nothing: a ContextVar's set
    per job cost the no-op App a tenth of its rate.  Their job is found up
    the stack, in the worker's ``_handle`` awaiting the function."""
    job = _current_job.get()
    if job is not None:
        return job
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _HANDLE_CODE:
            return frame.f_locals["job"]
        frame = frame.f_back  # type: ignore[assignment]
    return None


def current_tick() -> datetime | None:
    """In a periodic task: the tick its job was made for (UTC), else None."""
    job = current_job()
    if job is None:
        return None
    _, _, meta = decode_call(job)
    tick = meta.get("tick") if meta else None
    return None if tick is None else datetime.fromtimestamp(tick, timezone.utc)


def decode_call(job: Job) -> tuple[tuple, dict, dict | None]:
    """A task job's ``(args, kwargs, options)``, see the module doc."""
    body = job.body
    if not isinstance(body, list) or len(body) > 3:
        return (body,), {}, None
    args = body[0] if body else []
    kwargs = body[1] if len(body) > 1 else {}
    meta = body[2] if len(body) > 2 else None
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not (
            meta is None or isinstance(meta, dict)):
        return (body,), {}, None
    return tuple(args), kwargs, meta


def encode_call(args: tuple, kwargs: dict, meta: dict | None) -> list[Any]:
    if meta:
        return [list(args), kwargs, meta]
    if kwargs:
        return [list(args), kwargs]
    return [list(args)] if args else []


def _backoff(value: Any) -> Backoff | None:
    if value is None or isinstance(value, Backoff):
        return value
    return Backoff(*value)  # from a body: [base, cap, jitter]


class Task:
    """A registered function (``@app.job``): call it as before, or
    ``enqueue`` it.  ``with_options(...)`` gives the same task with one
    call's own settings."""

    def __init__(self, app: "App", fn: Callable[..., Any], queue: str,
                 options: dict[str, Any], call_options: Iterable[str] = ()) -> None:
        unknown = set(options) - set(ADD_OPTIONS) - set(RUN_OPTIONS) - {"max_running"}
        if unknown:
            raise TypeError(f"unknown task option(s): {', '.join(sorted(unknown))}")
        if options.get("backoff") is not None:
            options["backoff"] = _backoff(options["backoff"]).check()
        self.app, self.fn, self.queue, self.options = app, fn, queue, options
        # Set by .with_options for the worker: carried in the job's body.
        self.call_options = frozenset(call_options) & {"timeout", "backoff"}
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {getattr(self.fn, '__qualname__', self.fn)} queue={self.queue!r}>"

    def option(self, name: str) -> Any:
        """This task's setting, else the App's."""
        value = self.options.get(name)
        return self.app.defaults.get(name) if value is None else value

    def with_options(self, **options: Any) -> "Task":
        """This task with one call's own settings (``delay``, ``retry``,
        ``ttl``, ``replicate``, ``timeout``, ``backoff``, ``results``, and
        add_job's ``maxlen``, ``timeout_ms``, ``asynchronous``,
        ``idempotency_key``)."""
        if "max_running" in options:
            raise TypeError("max_running is the task's (@app.job), not one call's")
        return Task(self.app, self.fn, self.queue, {**self.options, **options},
                    self.call_options | set(options))

    # -- producing
    def _prepare(self, args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, Any], bool]:
        """The body and add_job's options of one call, and whether it wants a result."""
        meta: dict[str, Any] = {}
        if "timeout" in self.call_options:
            meta["t"] = self.options["timeout"]
        if "backoff" in self.call_options:
            backoff = self.options["backoff"]
            meta["b"] = None if backoff is None else list(backoff)
        results = bool(self.option("results"))
        if results:
            meta["r"] = self.app.replies.route(self.app.client, self.app.result_ttl)
        add = {k: self.option(k) for k in ADD_OPTIONS if self.option(k) is not None}
        return encode_call(args, kwargs, meta), add, results

    def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        """Add one job calling this function with these arguments: an
        :class:`~disquette.EnqueuedJob` (awaitable on an App over an
        AsyncClient)."""
        body, add, results = self._prepare(args, kwargs)
        timeout_ms = add.pop("timeout_ms", None)
        replies = self.app.replies if results else None
        if self.app.is_async:
            async def add_async() -> EnqueuedJob:
                jid = await self.app.client.add_job(self.queue, body, timeout_ms, **add)
                return EnqueuedJob(jid, self.queue, self.app, replies)
            return add_async()
        jid = self.app.client.add_job(self.queue, body, timeout_ms, **add)
        return EnqueuedJob(jid, self.queue, self.app, replies)

    def enqueue_many(self, calls: Iterable[Any], **add_jobs_options: Any) -> Any:
        """Add one job per call, pipelined (``client.add_jobs``): each call is a
        tuple of positional arguments, a dict of keyword arguments, or one
        argument.  A list of EnqueuedJob (awaitable on an AsyncClient)."""
        items, wants = [], False
        for call in calls:
            if isinstance(call, tuple):
                args, kwargs = call, {}
            elif isinstance(call, dict):
                args, kwargs = (), call
            else:
                args, kwargs = (call,), {}
            body, add, wants = self._prepare(args, kwargs)
            items.append((self.queue, body, add))
        replies = self.app.replies if wants else None

        def handles(ids: list[str]) -> list[EnqueuedJob]:
            return [EnqueuedJob(i, self.queue, self.app, replies) for i in ids]

        if self.app.is_async:
            async def add_async() -> list[EnqueuedJob]:
                return handles(await self.app.client.add_jobs(items, **add_jobs_options))
            return add_async()
        return handles(self.app.client.add_jobs(items, **add_jobs_options))


class App:
    """Tasks by queue, and the worker that runs them all (see the module doc).

    ``client``: a :class:`~disquette.Client` or :class:`~disquette.AsyncClient`
    (producers' calls then await).  Defaults for every task: ``retry``,
    ``ttl``, ``replicate``, ``delay``, ``timeout`` (seconds a handler may
    run), ``backoff`` (a :class:`~disquette.Backoff`), ``results``.
    ``result_ttl``: seconds a result waits for its reader.  ``prefix``: of
    the reply queue's name.
    """

    def __init__(self, client: Any, *, result_ttl: int = 3600, prefix: str = "disquette",
                 **defaults: Any) -> None:
        unknown = set(defaults) - set(ADD_OPTIONS) - set(RUN_OPTIONS)
        if unknown:
            raise TypeError(f"unknown App option(s): {', '.join(sorted(unknown))}")
        if defaults.get("backoff") is not None:
            defaults["backoff"] = _backoff(defaults["backoff"]).check()
        self.client = client
        self.is_async = isinstance(client, AsyncClient)
        self.defaults = defaults
        self.result_ttl = result_ttl
        self.replies = Replies(prefix)
        self.tasks: dict[str, Task] = {}
        self.periodic_jobs: list[tuple[str, Task, Schedule, int]] = []

    def job(self, queue: str, **options: Any) -> Callable[[Callable[..., Any]], Task]:
        """Register a function for ``queue`` (one function a queue)::

            @app.job("emails", retry=60, timeout=30, max_running=5)
            async def send_email(to): ...
        """
        def register(fn: Callable[..., Any]) -> Task:
            if queue in self.tasks:
                raise ValueError(f"queue {queue!r} already runs {self.tasks[queue]!r}")
            task = Task(self, fn, queue, dict(options))
            self.tasks[queue] = task
            return task
        return register

    def periodic(self, cron: str | None = None, *, every: float | timedelta | None = None,
                 queue: str | None = None, tz: tzinfo | None = None,
                 **options: Any) -> Callable[[Callable[..., Any]], Task]:
        """Register a function run once per tick of ``cron`` (``"*/5 * * * *"``,
        UTC unless ``tz``) or ``every`` seconds, by whichever worker takes the
        tick's job (disquette/periodic.py).  ``queue``: default
        ``periodic:<module>.<name>``; ``ttl`` default: two periods, at least
        an hour (a tick not run by then is dropped); other options as
        ``@app.job``."""
        schedule = Schedule(cron, every, tz)

        def register(fn: Callable[..., Any]) -> Task:
            name = f"{fn.__module__}.{fn.__qualname__}"
            q = queue or f"periodic:{name}"
            opts = dict(options)
            opts.setdefault("ttl", max(PERIODIC_TTL_MIN, int(2 * schedule.period())))
            task = self.job(q, **opts)(fn)
            self.periodic_jobs.append((name, task, schedule, task.options["ttl"]))
            return task
        return register

    # -- working
    def worker(self, queues: Iterable[str] | None = None, **options: Any) -> "AppWorker":
        """A Worker for every task's queue (or ``queues``, some of them);
        ``options`` are the Worker's (``concurrency``, ``max_attempts``...)."""
        names = list(self.tasks) if queues is None else list(queues)
        missing = [q for q in names if q not in self.tasks]
        if missing:
            raise ValueError(f"no task for queue(s) {', '.join(missing)}")
        if not names:
            raise ValueError("the App has no task: register one with @app.job")
        return AppWorker(self, names, **options)

    def run(self, **options: Any) -> None:
        """Serve every task until stopped (``worker(**options).run()``)."""
        self.worker(**options).run()


class AppWorker(Worker):
    """The Worker of an App: one handler for every task's queue (``_handle``),
    with the periodic jobs' schedules and the limits' slots beside it."""

    def __init__(self, app: App, queues: list[str], **options: Any) -> None:
        client = options.pop("client", None) or app.client
        options.setdefault("backoff", self._backoff_of)
        super().__init__(client, queues, self._handle, **options)
        self.app = app
        self.tasks = {q: app.tasks[q] for q in queues}
        # A task with nothing around its call: the function, awaited.
        self._bare = {q: t.fn for q, t in self.tasks.items()
                      if t.is_async and not t.option("timeout") and not t.option("max_running")}
        self.limiters = {q: Limiter(q, t.options["max_running"], t.option("retry"))
                         for q, t in self.tasks.items() if t.options.get("max_running")}
        self._empty = client.serializer.encode([])
        self._threads: ThreadPoolExecutor | None = None

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        if any(not t.is_async for t in self.tasks.values()):
            self._threads = ThreadPoolExecutor(self.concurrency,
                                               thread_name_prefix="disquette-worker")
        side: list[asyncio.Task[Any]] = []

        def start(coro: Any) -> None:
            task = loop.create_task(coro)
            task.add_done_callback(self._side_ended)
            side.append(task)

        async def started() -> None:  # the schedules, once serve() made its AsyncClient
            while getattr(self, "_aclient", None) is None:
                await asyncio.sleep(0.01)
            for name, task, schedule, ttl in self.app.periodic_jobs:
                if task.queue in self.tasks:
                    start(schedule_loop(self._aclient, name, task.queue, schedule,
                                        lambda tick: encode_call((), {}, {"tick": tick}), ttl,
                                        task.option("retry") or 60))

        self._aclient = None  # type: ignore[assignment]
        for limiter in self.limiters.values():
            start(limiter.keep())
        start(started())
        try:
            await super().serve()
        finally:
            for t in side:
                t.cancel()
            ended = await asyncio.gather(*side, return_exceptions=True)
            for limiter in self.limiters.values():
                await limiter.close()
            if self._threads is not None:
                self._threads.shutdown(wait=False, cancel_futures=True)
        for error in ended:  # a bug of ours in a schedule or a limit: raise it
            if isinstance(error, Exception):
                raise error

    def _side_ended(self, task: asyncio.Task[Any]) -> None:
        """A schedule or a slot keeper ended on its own: a bug of ours, which
        stops the worker (serve() raises it) rather than leave it running
        without them."""
        if not task.cancelled() and task.exception() is not None:
            log.error("%r failed: stopping the worker", task, exc_info=task.exception())
            self._request_stop(False)

    def _backoff_of(self, job: Job) -> Backoff | None:
        """The backoff of a failed job: its call's, its task's, the App's."""
        _, _, meta = decode_call(job)
        if meta and meta.get("b") is not None:
            return _backoff(meta["b"])
        return self.tasks[job.queue].option("backoff")

    async def _handle(self, job: Job) -> Any:
        fn = self._bare.get(job.queue)
        if fn is not None and job.raw == self._empty:  # the plain path: nothing around it
            return await fn()
        args, kwargs, meta = decode_call(job)
        if fn is not None and not meta:
            return await fn(*args, **kwargs)
        return await self._run(self.tasks[job.queue], job, args, kwargs, meta or {})

    async def _run(self, task: Task, job: Job, args: tuple, kwargs: dict,
                   meta: dict[str, Any]) -> Any:
        _current_job.set(job)  # in this job's context (the worker made it its own)
        timeout = meta["t"] if "t" in meta else task.option("timeout")
        route = meta.get("r")
        limiter = self.limiters.get(task.queue)
        release = None
        if limiter is not None:
            slot = await limiter.acquire(self._aclient)
            release = functools.partial(limiter.release, slot)
        try:
            value = await self._call(task, job, args, kwargs, timeout, release)
        except Exception as e:
            if route is not None and self.policy.after_failure(job, e) is not None:
                await send_result(self._aclient, route, error_reply(job.id, e))
            raise
        if route is not None:
            await send_result(self._aclient, route, ok_reply(job.id, value))
        return value

    async def _call(self, task: Task, job: Job, args: tuple, kwargs: dict,
                    timeout: float | None, release: Callable[[], Any] | None) -> Any:
        """The function's call; ``release`` (a limit's slot) once it is over."""
        if task.is_async:
            try:
                if not timeout:
                    return await task.fn(*args, **kwargs)
                try:
                    async with asyncio.timeout(timeout) as limit:
                        return await task.fn(*args, **kwargs)
                except TimeoutError:
                    if limit.expired():
                        raise JobTimeout(timeout) from None
                    raise
            finally:
                if release is not None:
                    await release()
        # A def function: in a thread, in this job's context (current_job()),
        # with job.working() through the worker's loop.  A time limit or a lost
        # lease stops the wait, not the thread: its slot is given back when the
        # thread ends.
        job._client = self._bridge
        loop = asyncio.get_running_loop()
        thread = self._threads.submit(  # type: ignore[union-attr]
            contextvars.copy_context().run, functools.partial(task.fn, *args, **kwargs))
        if release is not None:
            thread.add_done_callback(
                lambda _: loop.call_soon_threadsafe(self._spawn, release()))
        running = asyncio.wrap_future(thread)
        if not timeout:
            return await running
        try:
            return await asyncio.wait_for(running, timeout)
        except TimeoutError:
            if running.cancelled():  # ours: the thread runs on, its result ignored
                raise JobTimeout(timeout) from None
            raise


# current_job() looks for this frame up the stack (the hot path sets no ContextVar).
_HANDLE_CODE = AppWorker._handle.__code__
