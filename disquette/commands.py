"""Every Disque command, defined once for :class:`~disquette.Client` and
:class:`~disquette.AsyncClient`.

A method builds a :class:`Request` (the arguments, how to read the reply,
whether it may be sent again after a lost reply, which node it should go to)
and returns ``self._run(request)``: the value itself in ``Client``, an
awaitable in ``AsyncClient`` (the same trick redis-py uses for its commands).
Parsing replies is plain code here, with no I/O, so both clients share it.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple

from redis._parsers.helpers import parse_info  # redis-py's INFO reader

from .job import _UNDECODED, Job, received, text
from .topology import parse_hello
from .tracing import TRACE_MAGIC, split_body, traced_add

ADD_OPTIONS = ("replicate", "delay", "retry", "ttl", "maxlen")
ADD_DEFAULT_TIMEOUT_MS = 5000
# The broker's bound on an IDEMPOTENCY key (broker/idempotency.py), checked
# here too so that a bad key fails before anything is sent.
IDEMPOTENCY_KEY_MAX_BYTES = 256


class Request(NamedTuple):
    args: tuple
    parse: Callable[[Any, Any, str], Any] | None = None  # (reply, client, node addr)
    resend: bool = True          # safe to send again (elsewhere) after a lost reply
    node: str | None = None      # preferred node (the one that delivered a job)
    timeout: float | None = 0.0  # extra seconds the reply may take (None: no limit)
    add: bool = False            # an ADDJOB: its errors name the queue


def addjob_args(queue: str, raw: bytes, timeout_ms: int, options: dict[str, Any]) -> list:
    args: list[Any] = ["ADDJOB", queue, raw, timeout_ms]
    for name in ADD_OPTIONS:
        value = options.get(name)
        if value is not None:
            args += [name.upper(), value]
    if options.get("asynchronous"):
        args.append("ASYNC")
    if options.get("hold"):
        args.append("HOLD")     # (ext) held until ENQUEUE releases it
    key = options.get("idempotency_key")
    if key is not None:
        args += ["IDEMPOTENCY", key]
    return args


def idempotency_key(key: Any) -> bytes | None:
    """``add_job(..., idempotency_key=...)``: str (UTF-8) or bytes, 1 to 256
    bytes, or None (no key)."""
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode()
    elif not isinstance(key, (bytes, bytearray, memoryview)):
        raise TypeError(f"idempotency_key must be str or bytes, not {type(key).__name__}")
    key = bytes(key)
    if not 0 < len(key) <= IDEMPOTENCY_KEY_MAX_BYTES:
        raise ValueError(f"idempotency_key must be 1 to {IDEMPOTENCY_KEY_MAX_BYTES} bytes "
                         f"long, not {len(key)}")
    return key


def addjob_request(serializer: Any, queue: str, body: Any, timeout_ms: int | None,
                   options: dict[str, Any]) -> Request:
    timeout_ms = ADD_DEFAULT_TIMEOUT_MS if timeout_ms is None else int(timeout_ms)
    unknown = set(options) - set(ADD_OPTIONS) - {"asynchronous", "hold", "idempotency_key"}
    if unknown:
        raise TypeError(f"unknown add_job option(s): {', '.join(sorted(unknown))}")
    key = idempotency_key(options.get("idempotency_key"))
    args = addjob_args(queue, serializer.encode(body), timeout_ms,
                       {**options, "idempotency_key": key})
    # With a key a lost reply is safe to send again, to another node: a node
    # that knows the key answers the first add's id (docs/sdk.md, its window).
    return Request(tuple(args), _parse_text, resend=key is not None,
                   timeout=None if timeout_ms == 0 else timeout_ms / 1000, add=True)


def batch_item(item: Any) -> tuple[str, Any, dict[str, Any]]:
    """One ``add_jobs`` item: ``(queue, body)``, ``(queue, body, {options})``
    or ``{"queue": ..., "body": ..., option: value...}``."""
    if isinstance(item, dict):
        opts = dict(item)
        try:
            return opts.pop("queue"), opts.pop("body"), opts
        except KeyError as e:
            raise TypeError(f"add_jobs item {item!r} has no {e.args[0]!r}") from None
    if isinstance(item, (tuple, list)) and len(item) in (2, 3):
        return item[0], item[1], dict(item[2]) if len(item) == 3 else {}
    raise TypeError(f"add_jobs item must be (queue, body[, options]) or a dict, not {item!r}")


def batch_requests(serializer: Any, items: Iterable[Any],
                   defaults: dict[str, Any]) -> list[Request]:
    reqs = []
    for i, item in enumerate(items):
        queue, body, opts = batch_item(item)
        merged = {**defaults, **opts}
        timeout_ms = merged.pop("timeout_ms", None)
        try:
            reqs.append(addjob_request(serializer, queue, body, timeout_ms, merged))
        except (TypeError, ValueError) as e:
            raise type(e)(f"add_jobs item {i} (queue {queue!r}): {e}") from e
    return reqs


def _parse_text(reply: Any, client: Any, node: str) -> str:
    return text(reply)


def _parse_int(reply: Any, client: Any, node: str) -> int:
    return int(reply)


def _parse_pairs(reply: Any) -> dict[str, Any] | None:
    """A flat field/value array (SHOW, QSTAT) as a dict with ``_`` keys;
    bulk values become ``str``, arrays of bulk strings lists of ``str``."""
    if reply is None:
        return None
    if isinstance(reply, dict):  # tolerate a server that sends a RESP3 map
        reply = [x for kv in reply.items() for x in kv]
    out: dict[str, Any] = {}
    for key, value in zip(reply[::2], reply[1::2]):
        name = text(key).replace("-", "_")
        if isinstance(value, bytes) and name != "body":
            value = text(value)
        elif isinstance(value, list):
            value = [text(v) if isinstance(v, bytes) else v for v in value]
        out[name] = value
    return out


def _parse_show(reply: Any, client: Any, node: str) -> dict[str, Any] | None:
    job = _parse_pairs(reply)
    if job is not None and "body" in job:
        raw = job["body"]
        if isinstance(raw, bytes) and raw.startswith(TRACE_MAGIC):
            raw, job["trace_context"] = split_body(raw)
        job["raw"] = raw
        job["body"] = client.serializer.decode(raw)
    return job


def _parse_qstat(reply: Any, client: Any, node: str) -> dict[str, Any] | None:
    return _parse_pairs(reply)


def _parse_jobs(reply: Any, client: Any, node: str) -> list[Job]:
    """GETJOB / QPEEK: ``[[queue, id, body(, "nacks", n, "additional-deliveries", n)]...]``."""
    if not reply:
        return []
    serializer = client.serializer
    if len(reply[0]) == 7:  # WITHCOUNTERS, as the Worker asks: its hot loop
        return received(reply, node, client, serializer)
    jobs = []
    append = jobs.append
    queue_raw, queue = None, ""
    for entry in reply:
        if entry[0] != queue_raw:
            queue_raw = entry[0]
            queue = text(queue_raw)
        raw = entry[2]
        carried = None
        if raw.startswith(TRACE_MAGIC):  # a producer's trace context (tracing.py)
            raw, carried = split_body(raw)
        if len(entry) >= 7:
            append(Job(text(entry[1]), queue, _UNDECODED, raw, int(entry[4]), int(entry[6]),
                       node, client, serializer, carried))
        else:
            append(Job(text(entry[1]), queue, _UNDECODED, raw, None, None, node, client,
                       serializer, carried))
    return jobs


def _parse_getjob(reply: Any, client: Any, node: str) -> list[Job]:
    jobs = _parse_jobs(reply, client, node)
    if jobs:
        client._observe([j.id for j in jobs])
    return jobs


def parse_hello_reply(reply: Any, client: Any, node: str) -> Any:
    hello = parse_hello(reply)
    client._learn(node, hello)
    return hello


def _parse_info(reply: Any, client: Any, node: str) -> dict[str, Any]:
    return parse_info(reply.decode() if isinstance(reply, bytes) else str(reply))


def _parse_scan(reply: Any, client: Any, node: str) -> tuple[int, list[Any]]:
    items = [text(x) if isinstance(x, bytes) else _parse_show(x, client, node)
             for x in reply[1]]
    return int(reply[0]), items


def ids_request(command: str, ids: tuple, node: str | None = None) -> Request:
    """ACKJOB, FASTACK, NACK, ENQUEUE, DEQUEUE, DELJOB: ``ids`` may also be one
    list of ids; the reply is a count."""
    if len(ids) == 1 and isinstance(ids[0], (list, tuple, set)):
        ids = tuple(ids[0])
    return Request((command, *ids), _parse_int, node=node)


def scan_args(command: str, cursor: int, count: int | None, options: list[Any]) -> tuple:
    args: list[Any] = [command, cursor]
    if count is not None:
        args += ["COUNT", count]
    return tuple(args + options)


def jscan_options(queue: str | None, states: Iterable[str], reply: str | None,
                  busyloop: bool) -> list[Any]:
    opts: list[Any] = ["BUSYLOOP"] if busyloop else []
    if queue is not None:
        opts += ["QUEUE", queue]
    for s in states:
        opts += ["STATE", s]
    if reply is not None:
        opts += ["REPLY", reply]
    return opts


def qscan_options(minlen: int | None, maxlen: int | None, importrate: int | None,
                  busyloop: bool) -> list[Any]:
    opts: list[Any] = ["BUSYLOOP"] if busyloop else []
    for name, value in (("MINLEN", minlen), ("MAXLEN", maxlen), ("IMPORTRATE", importrate)):
        if value is not None:
            opts += [name, value]
    return opts


def getjob_request(queues: tuple, count: int | None, timeout_ms: int | None, nohang: bool,
                   withcounters: bool) -> Request:
    if len(queues) == 1 and isinstance(queues[0], (list, tuple)):
        queues = tuple(queues[0])
    if not queues:
        raise TypeError("get_jobs needs at least one queue")
    args: list[Any] = ["GETJOB"]
    if nohang:
        args.append("NOHANG")
    if timeout_ms is not None:
        args += ["TIMEOUT", timeout_ms]
    if count is not None:
        args += ["COUNT", count]
    if withcounters:
        args.append("WITHCOUNTERS")
    args += ["FROM", *queues]
    blocking = not nohang and (timeout_ms is None or timeout_ms == 0)
    return Request(tuple(args), _parse_getjob,
                   timeout=None if blocking else (0 if nohang else timeout_ms / 1000))


def peek_request(queue: str, limit: int | None, node: str) -> Request:
    """QPEEK of up to ``limit`` jobs (all by default) on one node."""
    return Request(("QPEEK", queue, limit or 1_000_000), _parse_jobs, node=node)


def take_request(queue: str, limit: int | None, taken: int, node: str) -> Request:
    """GETJOB NOHANG of the next slice (at most 100) of ``limit`` jobs on one node."""
    want = 100 if limit is None else min(100, limit - taken)
    return Request(("GETJOB", "NOHANG", "COUNT", want, "WITHCOUNTERS", "FROM", queue),
                   _parse_jobs, node=node, timeout=0.0)


class Commands:
    """The command methods shared by both clients (see the module doc)."""

    serializer: Any
    socket_timeout: float | None
    _tracing: bool | None = None  # see tracing.py: None spans if configured, True + context

    def _run(self, req: Request) -> Any:  # pragma: no cover - provided by the clients
        raise NotImplementedError

    def _scan(self, command: str, count: int | None, options: list[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - provided by the clients

    # -- producing
    def add_job(self, queue: str, body: Any, timeout_ms: int | None = None, *,
                replicate: int | None = None, delay: int | None = None,
                retry: int | None = None, ttl: int | None = None, maxlen: int | None = None,
                asynchronous: bool = False, hold: bool = False,
                idempotency_key: str | bytes | None = None) -> Any:
        """ADDJOB: add a job; returns its id once ``replicate`` nodes hold a copy
        (at once with ``asynchronous=True``).

        ``body``: bytes pass through, anything else goes through the client's
        serializer.  ``timeout_ms`` (default 5000; 0 = no limit) bounds the wait
        for replication.  Raises a :class:`ReplyError` subclass when the node
        refuses (NoReplicationError, QueuePausedError, MaxLenError,
        OutOfMemoryError...), :class:`ReplyLostError` when the connection failed
        after sending (the job may exist), :class:`NoNodeAvailableError` when no
        node could be reached (it does not).  Never sent twice, unless it has an
        ``idempotency_key`` (str or bytes, up to 256 bytes): then a lost reply is
        retried on another node, which answers the first add's id if it holds a
        copy of that job (or knew it, for the job's TTL), so the retry creates
        no second job (the window where it can is in docs/sdk.md).

        ``hold=True`` (a Disquette extension, ADDJOB ... HOLD): the job is
        replicated but held, never delivered until :meth:`enqueue` on any
        node holding it releases it (its ``delay`` and ``retry`` start then).
        With opentelemetry, an ``add`` span (see :mod:`disquette.tracing`).
        """
        req = addjob_request(self.serializer, queue, body, timeout_ms, {
            "replicate": replicate, "delay": delay, "retry": retry, "ttl": ttl,
            "maxlen": maxlen, "asynchronous": asynchronous, "hold": hold,
            "idempotency_key": idempotency_key})
        if self._tracing is False:
            return self._run(req)
        return traced_add(self._run, req, queue, self._tracing)

    # -- consuming
    def get_jobs(self, *queues: str, count: int | None = None, timeout_ms: int | None = 0,
                 nohang: bool = False, withcounters: bool = True) -> Any:
        """GETJOB: up to ``count`` jobs from the queues (served left to right),
        as a list of :class:`Job`; ``[]`` when ``timeout_ms`` passes first
        (0 = wait for ever) or, with ``nohang``, when nothing is queued.
        ``withcounters`` (default) fills ``job.nacks`` and
        ``job.additional_deliveries``.  A node that is leaving answers
        ``-LEAVING``: the client moves to another node and asks again.
        """
        return self._run(getjob_request(queues, count, timeout_ms, nohang, withcounters))

    def ack_job(self, *job_ids: str, node: str | None = None) -> Any:
        """ACKJOB: the jobs are done; returns how many were known and not yet acked."""
        return self._run(ids_request("ACKJOB", job_ids, node))

    def fast_ack(self, *job_ids: str, node: str | None = None) -> Any:
        """FASTACK: delete the jobs here and, best effort, everywhere."""
        return self._run(ids_request("FASTACK", job_ids, node))

    def nack_job(self, *job_ids: str, node: str | None = None) -> Any:
        """NACK: the jobs failed; queue them again now (``nacks`` + 1)."""
        return self._run(ids_request("NACK", job_ids, node))

    def working(self, job_id: str, node: str | None = None) -> Any:
        """WORKING: postpone the job's next delivery by its RETRY; returns the
        RETRY seconds.  NoJobError / TooLateError when refused."""
        return self._run(Request(("WORKING", job_id), _parse_int, node=node))

    def enqueue(self, *job_ids: str, node: str | None = None) -> Any:
        """ENQUEUE: queue the jobs if not already queued (releases held ones);
        returns how many were."""
        return self._run(ids_request("ENQUEUE", job_ids, node))

    def dequeue(self, *job_ids: str, node: str | None = None) -> Any:
        """DEQUEUE: take the jobs out of their queue; returns how many were."""
        return self._run(ids_request("DEQUEUE", job_ids, node))

    def del_job(self, *job_ids: str, node: str | None = None) -> Any:
        """DELJOB: forget the jobs on this node only; returns how many were."""
        return self._run(ids_request("DELJOB", job_ids, node))

    # -- inspecting
    def show(self, job_id: str, node: str | None = None) -> Any:
        """SHOW: every field of a job as a dict (``additional_deliveries``,
        ``nodes_delivered``..., ``body`` decoded and ``raw``), or None."""
        return self._run(Request(("SHOW", job_id), _parse_show, node=node))

    def qlen(self, queue: str) -> Any:
        """QLEN: jobs queued in ``queue`` on the current node."""
        return self._run(Request(("QLEN", queue), _parse_int))

    def qpeek(self, queue: str, count: int = 1) -> Any:
        """QPEEK: the ``count`` oldest queued jobs (newest first if count < 0),
        without taking them, as :class:`Job` objects."""
        return self._run(Request(("QPEEK", queue, count), _parse_jobs))

    def qstat(self, queue: str) -> Any:
        """QSTAT: the queue's state as a dict (``len``, ``age``, ``idle``,
        ``blocked``, ``import_from``, ``import_rate``, ``jobs_in``, ``jobs_out``,
        ``pause``), or None if there is no such queue."""
        return self._run(Request(("QSTAT", queue), _parse_qstat))

    def jscan(self, *, count: int | None = None, queue: str | None = None,
              states: Iterable[str] = (), reply: str | None = None,
              busyloop: bool = False) -> Any:
        """JSCAN over the current node, following the cursor to its end:
        job ids, or SHOW dicts with ``reply="all"`` (an iterator; an async
        iterator in AsyncClient)."""
        return self._scan("JSCAN", count, jscan_options(queue, states, reply, busyloop))

    def qscan(self, *, count: int | None = None, minlen: int | None = None,
              maxlen: int | None = None, importrate: int | None = None,
              busyloop: bool = False) -> Any:
        """QSCAN over the current node: queue names (an iterator; an async
        iterator in AsyncClient)."""
        return self._scan("QSCAN", count, qscan_options(minlen, maxlen, importrate, busyloop))

    def pause(self, queue: str, *options: str, bcast: bool = False) -> Any:
        """PAUSE: ``in``, ``out``, ``all``, ``none`` or ``state``; ``bcast`` to
        every node.  Returns the queue's pause state after the call."""
        args = ("PAUSE", queue, *options, *(("bcast",) if bcast else ()))
        return self._run(Request(args, _parse_text))

    def hello(self) -> Any:
        """HELLO: the Disque topology, as a :class:`~disquette.Hello` (the
        client also learns the nodes from it)."""
        return self._run(Request(("HELLO",), parse_hello_reply))

    def info(self, section: str | None = None) -> Any:
        """INFO as a dict (redis-py's parser)."""
        return self._run(Request(("INFO",) if section is None else ("INFO", section),
                                 _parse_info))

    def ping(self) -> Any:
        return self._run(Request(("PING",)))

    def execute_command(self, *args: Any, resend: bool = False) -> Any:
        """Any other command, on the current node, with the same failover
        (``resend=True`` only for commands safe to repeat)."""
        return self._run(Request(args, resend=resend))
