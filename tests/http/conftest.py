"""Fixtures for the HTTP shell's tests: real nodes started with ``http-port``,
talked to over real sockets with aiohttp's client (and redis-py on the same
node, to check that both paths see the same thing).

``hnode`` is the module's shared node (DEBUG FLUSHALL before each test),
``http`` an aiohttp ClientSession on its HTTP port.
"""

from __future__ import annotations

from typing import Any, Iterator

import aiohttp
import pytest

from tests.conftest import _FACTORIES
from tests.harness import NodeFactory, NodeProcess, free_port, module_factory


def start_http_node(factory: NodeFactory, *args: Any, **directives: Any) -> NodeProcess:
    """A node with an HTTP port (``node.http_url``)."""
    port = free_port(bus_offset=0)
    n = factory(*args, http_port=port, **directives)
    n.http_port = port
    n.http_url = f"http://127.0.0.1:{port}"
    return n


@pytest.fixture(scope="module")
def hfactory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "http")


@pytest.fixture(scope="module")
def hnode_shared(hfactory: NodeFactory) -> NodeProcess:
    return start_http_node(hfactory)


@pytest.fixture
def hnode(request, hfactory: NodeFactory, hnode_shared: NodeProcess) -> Iterator[NodeProcess]:
    """The module's node with an HTTP port, empty, default config."""
    request.node.stash.setdefault(_FACTORIES, []).append(hfactory)
    if not hnode_shared.is_alive():
        hnode_shared.start()
    with hnode_shared.raw() as r:
        assert r.call("DEBUG", "FLUSHALL") == b"+OK\r\n"
        assert r.call("CONFIG", "SET", "maxmemory", "1gb") == b"+OK\r\n"
    try:
        yield hnode_shared
    finally:
        hnode_shared._close_clients()


@pytest.fixture
async def http(hnode: NodeProcess):
    async with aiohttp.ClientSession(hnode.http_url) as s:
        yield s
