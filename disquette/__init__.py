"""Disquette's Python SDK: a cluster-aware Disque client (sync and asyncio),
a Worker, and an App of tasks, on redis-py.

    from disquette import Client, AsyncClient, Job, Worker, App, Backoff

The names below are imported from their modules on first use (PEP 562), so
that a program needing one module of the package imports no more: the node
reads the job record, the AOF codec and the version from here without
loading redis-py and the rest of the SDK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .app import App, Task, current_job, current_tick
    from .backoff import Backoff
    from .client import Client
    from .dead_letters import DeadLetter
    from .errors import (
        AddJobsError, AuthenticationError, BadJobIdError, DisqueConnectionError, DisqueError,
        JobError, JobTimeout, LeaseLost, LeavingError, LoadingError, MaxLenError, NoJobError,
        NoNodeAvailableError, NoReplicationError, OutOfMemoryError, PersistenceError,
        QueuePausedError, ReplyError, ReplyLostError, TooLateError,
    )
    from .job import Job
    from .poison import PoisonPolicy
    from .results import EnqueuedJob
    from .serializers import JSON, MSGPACK, Serializer
    from .topology import Hello, NodeInfo
    from .worker import Worker

# Each public name and the module that defines it (the imports above, for
# type checkers).
_MODULES = {
    "AsyncClient": "aio",
    "App": "app", "Task": "app", "current_job": "app", "current_tick": "app",
    "Backoff": "backoff",
    "Client": "client",
    "DeadLetter": "dead_letters",
    **dict.fromkeys((
        "AddJobsError", "AuthenticationError", "BadJobIdError", "DisqueConnectionError",
        "DisqueError", "JobError", "JobTimeout", "LeaseLost", "LeavingError", "LoadingError",
        "MaxLenError", "NoJobError", "NoNodeAvailableError", "NoReplicationError",
        "OutOfMemoryError", "PersistenceError", "QueuePausedError", "ReplyError",
        "ReplyLostError", "TooLateError"), "errors"),
    "Job": "job",
    "PoisonPolicy": "poison",
    "EnqueuedJob": "results",
    "JSON": "serializers", "MSGPACK": "serializers", "Serializer": "serializers",
    "Hello": "topology", "NodeInfo": "topology",
    "Worker": "worker",
}

__all__ = sorted(_MODULES) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})
