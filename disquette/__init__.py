"""Disquette's Python SDK: a cluster-aware Disque client (sync and asyncio)
and a Worker, on redis-py.

    from disquette import Client, AsyncClient, Job, Worker
"""

from .aio import AsyncClient
from .client import Client
from .dead_letters import DeadLetter
from .errors import (
    AddJobsError, AuthenticationError, BadJobIdError, DisqueConnectionError, DisqueError,
    LeaseLost, LeavingError, LoadingError, MaxLenError, NoJobError, NoNodeAvailableError,
    NoReplicationError, OutOfMemoryError, PersistenceError, QueuePausedError, ReplyError,
    ReplyLostError, TooLateError,
)
from .job import Job
from .poison import PoisonPolicy
from .serializers import JSON, MSGPACK, Serializer
from .topology import Hello, NodeInfo
from .worker import Worker

__all__ = [
    "AddJobsError", "AsyncClient", "AuthenticationError", "BadJobIdError", "Client",
    "DeadLetter", "DisqueConnectionError", "DisqueError", "Hello", "JSON", "Job",
    "LeaseLost", "LeavingError", "LoadingError", "MSGPACK", "MaxLenError", "NoJobError",
    "NoNodeAvailableError", "NoReplicationError", "NodeInfo", "OutOfMemoryError",
    "PersistenceError", "PoisonPolicy", "QueuePausedError", "ReplyError", "ReplyLostError",
    "Serializer", "TooLateError", "Worker",
]
