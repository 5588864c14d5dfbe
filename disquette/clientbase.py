"""What :class:`~disquette.Client` and :class:`~disquette.AsyncClient` share:
their options, the redis-py connection settings, the topology glue and the
rules that turn a failed attempt into a retry on another node or a typed error.
The I/O itself (sync or asyncio) stays in the two client modules.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any

import redis.exceptions
from redis.backoff import ExponentialWithJitterBackoff

from .commands import Commands, Request, parse_hello_reply
from .dead_letters import DeadLetter
from .errors import (
    DisqueError, LeavingError, LoadingError, NoNodeAvailableError, ReplyError, ReplyLostError,
    reply_error,
)
from .job import Job
from .serializers import get_serializer
from .topology import Hello, Topology, parse_addr, parse_nodes

log = logging.getLogger("disquette.client")

# Errors that mean "no usable answer from this node": redis-py raises them
# for refused/reset connections and timeouts.  AuthenticationError is a
# ConnectionError subclass in redis-py and is handled before these.
CONNECTION_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
# An error reply (redis-py raises -NOAUTH/-WRONGPASS as AuthenticationError).
REPLY_ERRORS = (redis.exceptions.ResponseError, redis.exceptions.AuthenticationError)
# A failed topology refresh is logged, not raised: the command that follows
# fails over (or fails) on its own.
REFRESH_ERRORS = (DisqueError, TypeError, ValueError, IndexError)
# Replies that send the client to another node (Disque's client guidelines).
MOVE_ON_REPLIES = {LeavingError: 100, LoadingError: 10}

DEFAULT_RETRIES = 6


class NodeFailed(Exception):
    """Internal: one attempt on ``node`` failed in a way another node may not
    (never escapes the clients).  ``sent``: the command left this process."""

    def __init__(self, node: str, error: BaseException, sent: bool, priority: int | None = None):
        super().__init__(f"{node}: {error}")
        self.node, self.error, self.sent, self.priority = node, error, sent, priority

    def final(self) -> DisqueError:
        """The error the caller sees once no retry is left."""
        if isinstance(self.error, ReplyError):
            return self.error
        cls = ReplyLostError if self.sent else NoNodeAvailableError
        what = "reply lost" if self.sent else "no node reachable"
        return cls(f"{what}; last node {self.node}: {self.error}", node=self.node)


def classify_reply_error(exc: redis.exceptions.RedisError, node: str) -> Exception:
    """An error reply: LEAVING/LOADING say "try another node" (the command did
    not run, so any command may go elsewhere); the rest are final."""
    err = reply_error(exc, node)
    priority = MOVE_ON_REPLIES.get(type(err))
    if priority is not None:
        return NodeFailed(node, err, sent=False, priority=priority)
    return err


def classify_lost(exc: BaseException, req: Request, node: str) -> Exception:
    """The connection failed after the command was written."""
    if req.resend:
        return NodeFailed(node, exc, sent=True)
    return ReplyLostError(f"reply lost from {node} ({exc}); the command may have run",
                          node=node)


def tag_item(err: Exception, index: int, req: Request) -> Exception:
    """Name the ``add_jobs`` item an error belongs to."""
    if req.add:
        err.index = index  # type: ignore[attr-defined]
        err.queue = req.args[1]  # type: ignore[attr-defined]
    return err


def batch_lost(reqs: list[Request], start: int, exc: BaseException, node: str) -> list[Exception]:
    return [tag_item(ReplyLostError(f"reply lost from {node} ({exc}); the command may have "
                                    f"run", node=node), start + i, r)
            for i, r in enumerate(reqs)]


class ClientBase(Commands):
    """Options and topology for both clients.

    ``nodes``: ``"disque://[user:pass@]h:p,h:p"`` (``disques://`` for TLS), or
    a list of ``"host:port"``.  ``serializer``: ``"json"`` (default),
    ``"msgpack"``, a :class:`~disquette.Serializer` or a ``(dumps, loads)``
    pair.  ``protocol``: 2 (default, works with Disque itself) or 3 (RESP3).
    ``retry``: a redis-py ``Retry`` for failing over between nodes (default:
    6 retries with exponential backoff and jitter, 50 ms to 1 s).
    ``follow_producers``: move a consumer to the node that creates most of its
    jobs (after ``switch_min_jobs`` jobs).  ``refresh_interval``: seconds
    between HELLO refreshes of the topology.  Other keyword arguments go to
    redis-py's connections (``ssl_ca_certs``, ``ssl_certfile``, ``client_name``...).
    ``tracing``: OpenTelemetry spans (:mod:`disquette.tracing`): None (default)
    when a tracer provider is set, True to also carry the trace context in
    the bodies added, False for none.
    """

    _retry_class: Any = None  # redis.retry.Retry or redis.asyncio.retry.Retry

    def __init__(self, nodes: Any = None, *, password: str | None = None,
                 username: str | None = None, serializer: Any = "json", protocol: int = 2,
                 socket_timeout: float | None = 10.0, socket_connect_timeout: float | None = 5.0,
                 retry: Any = None, ssl: bool | None = None, max_connections: int | None = None,
                 refresh_interval: float = 60.0, follow_producers: bool = True,
                 switch_min_jobs: int = 100, shuffle: bool = False,
                 retry_down_after: float = 5.0, tracing: bool | None = None,
                 **connection_kwargs: Any) -> None:
        spec = parse_nodes(nodes)
        self._options = dict(
            nodes=list(spec.addrs), password=password, username=username, serializer=serializer,
            protocol=protocol, socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout, retry=retry, ssl=ssl,
            max_connections=max_connections, refresh_interval=refresh_interval,
            follow_producers=follow_producers, switch_min_jobs=switch_min_jobs, shuffle=shuffle,
            retry_down_after=retry_down_after, tracing=tracing, **connection_kwargs)
        self.serializer = get_serializer(serializer)
        self._tracing = tracing
        self.socket_timeout = socket_timeout
        self._ssl = spec.ssl if ssl is None else ssl
        self._conn_kwargs: dict[str, Any] = dict(
            username=username or spec.username, password=password or spec.password,
            protocol=protocol, socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout, encoding_errors="surrogateescape",
            **connection_kwargs)
        if max_connections is not None:
            self._conn_kwargs["max_connections"] = max_connections
        self._topology = Topology(spec.addrs, shuffle=shuffle, refresh_interval=refresh_interval,
                                  follow_producers=follow_producers,
                                  switch_min_jobs=switch_min_jobs,
                                  retry_down_after=retry_down_after)
        retry = copy.copy(retry) if retry is not None else self._retry_class(
            ExponentialWithJitterBackoff(base=0.05, cap=1.0), DEFAULT_RETRIES)
        retry.update_supported_errors([NodeFailed])
        self._retry = retry
        self._lock = threading.Lock()
        self._pools: dict[str, Any] = {}

    # -- topology
    @property
    def node(self) -> str:
        """The ``host:port`` the next command goes to."""
        return self._topology.current

    @property
    def node_id(self) -> str | None:
        """The id of the current node, once a HELLO told it."""
        return self._topology.node_id(self._topology.current)

    @property
    def nodes(self) -> list[str]:
        """Every known node, best first."""
        return self._topology.addrs()

    @property
    def switches(self) -> int:
        """How many times the consumer rule moved this client to another node."""
        return self._topology.switches

    def _learn(self, node: str, hello: Hello) -> None:
        with self._lock:
            before = self._topology.current
            self._topology.hello(node, hello, time.monotonic())
            if self._topology.current != before:
                log.info("moving from %s to %s (HELLO priorities)", before, self._topology.current)

    def _observe(self, job_ids: list[str]) -> None:
        with self._lock:
            moved = self._topology.observe_jobs(job_ids, time.monotonic())
        if moved:
            log.info("consumer moves to %s, where most of its jobs are created", moved)

    def _failed(self, error: Exception) -> None:
        """The ``fail`` callback of the Retry: avoid that node for a while."""
        if isinstance(error, NodeFailed):
            with self._lock:
                self._topology.failed(error.node, time.monotonic(), error.priority)
            log.warning("node %s failed (%s); now using %s", error.node, error.error,
                        self._topology.current)

    def _refresh_request(self) -> Request | None:
        """A HELLO to send before the next command, if the topology is due."""
        now = time.monotonic()
        if not self._topology.refresh_due(now):
            return None
        self._topology.next_refresh = now + 1.0  # until HELLO answers: no storm
        return Request(("HELLO",), parse_hello_reply)

    def _target(self, req: Request, tries: list[int]) -> str:
        """The node for this attempt: the preferred one first, then the best."""
        tries[0] += 1
        if req.node is not None and tries[0] == 1:
            return req.node
        return self._topology.current

    def _read_timeout(self, req: Request) -> float | None:
        if req.timeout is None or self.socket_timeout is None:
            return None
        return self.socket_timeout + req.timeout

    def _pool_args(self, node: str) -> dict[str, Any]:
        host, port = parse_addr(node)
        return dict(host=host, port=port, **self._conn_kwargs)

    def _dead_queue_jobs(self, jobs: list[Job]) -> list[Any]:
        return [DeadLetter.from_job(j, self.serializer) for j in jobs]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} node={self.node} nodes={self.nodes}>"


def options_of(client: ClientBase) -> dict[str, Any]:
    """The options a twin of ``client`` is built with (the worker makes an
    AsyncClient from a Client), current node first."""
    opts = dict(client._options)
    opts["nodes"] = [client.node] + [n for n in client.nodes if n != client.node]
    return opts

