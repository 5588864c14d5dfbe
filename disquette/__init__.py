"""Disquette's Python SDK: a cluster-aware Disque client (sync and asyncio),
a Worker, and an App of tasks, on redis-py.

    from disquette import Client, AsyncClient, Job, Worker, App, Backoff
"""

from .aio import AsyncClient
from .app import App, Task, current_job, current_tick
from .backoff import Backoff
from .client import Client
from .dead_letters import DeadLetter
from .errors import (
    AddJobsError, AuthenticationError, BadJobIdError, DisqueConnectionError, DisqueError,
    JobError, JobTimeout, LeaseLost, LeavingError, LoadingError, MaxLenError, NoJobError, NoNodeAvailableError,
    NoReplicationError, OutOfMemoryError, PersistenceError, QueuePausedError, ReplyError,
    ReplyLostError, TooLateError,
)
from .job import Job
from .poison import PoisonPolicy
from .results import EnqueuedJob
from .serializers import JSON, MSGPACK, Serializer
from .topology import Hello, NodeInfo
from .worker import Worker

__all__ = [
    "AddJobsError", "App", "AsyncClient", "AuthenticationError", "Backoff", "BadJobIdError",
    "Client", "DeadLetter", "DisqueConnectionError", "DisqueError", "EnqueuedJob", "Hello",
    "JSON", "Job", "JobError", "JobTimeout", "LeaseLost", "LeavingError", "LoadingError", "MSGPACK", "MaxLenError", "NoJobError",
    "NoNodeAvailableError", "NoReplicationError", "NodeInfo", "OutOfMemoryError",
    "PersistenceError", "PoisonPolicy", "QueuePausedError", "ReplyError", "ReplyLostError",
    "Serializer", "Task", "TooLateError", "Worker", "current_job", "current_tick",
]
