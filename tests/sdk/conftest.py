"""Fixtures for the SDK tests: real nodes, the SDK's own clients.

``dnode`` is the module's shared node, flushed (DEBUG FLUSHALL) before each
test; ``api`` is a Client or an AsyncClient (behind a blocking facade, so one
test body checks both), in RESP2 or RESP3.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Iterator

import pytest

from disquette import AsyncClient, Client
from tests.harness import NodeProcess
from tests.integration.conftest import shared_factory, shared_node, snode  # noqa: F401


@pytest.fixture
def dnode(snode: NodeProcess) -> NodeProcess:
    """The module's node (tests/integration's ``snode``: flushed), with the
    default maxmemory back (a test may have lowered it)."""
    with snode.raw() as r:
        assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"
    return snode


class Blocking:
    """An AsyncClient driven from synchronous test code: awaitables are run to
    completion, async iterators collected into lists, on one event loop."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()

    def run(self, value: Any) -> Any:
        if inspect.isawaitable(value):
            return self.loop.run_until_complete(value)
        if hasattr(value, "__aiter__"):
            async def collect() -> list[Any]:
                return [x async for x in value]
            return self.loop.run_until_complete(collect())
        return value

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not callable(attr):
            return attr
        return lambda *a, **kw: self.wrap(self.run(attr(*a, **kw)))

    def wrap(self, value: Any) -> Any:
        """Jobs returned by the async client get blocking ack()/working()..."""
        from disquette import Job

        jobs = value if isinstance(value, list) else [value]
        for j in jobs:
            if isinstance(j, Job):
                j._client = self
        return value

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()


def make_api(kind: str, nodes: Any, **options: Any) -> Any:
    if kind == "sync":
        return Client(nodes, **options)
    return Blocking(AsyncClient(nodes, **options))


@pytest.fixture(params=[("sync", 2), ("sync", 3), ("async", 2), ("async", 3)],
                ids=["sync-resp2", "sync-resp3", "async-resp2", "async-resp3"])
def api(request, dnode: NodeProcess) -> Iterator[Any]:
    """Client or AsyncClient (blocking facade) on ``dnode``, RESP2 or RESP3."""
    kind, protocol = request.param
    c = make_api(kind, dnode.addr, protocol=protocol)
    yield c
    c.close()
