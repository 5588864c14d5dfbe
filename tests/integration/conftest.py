"""Fixtures for the single-node integration tests.

Starting a node costs ~0.3 s, so tests whose state does not matter share one
node per module: ``snode`` hands out the module's node after ``DEBUG FLUSHALL``
(and restarts it if an earlier test killed it). Tests that need a node of
their own (config files, SHUTDOWN, limits) use ``node_factory``.
"""

from __future__ import annotations

import re
from typing import Iterator

import pytest

from tests.conftest import _FACTORIES
from tests.harness import NodeFactory, NodeProcess, module_factory

JOB_ID_RE = re.compile(rb"^D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}$")


@pytest.fixture(scope="module")
def shared_factory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "shared")


@pytest.fixture(scope="module")
def shared_node(shared_factory: NodeFactory) -> NodeProcess:
    return shared_factory()


@pytest.fixture
def snode(request, shared_factory: NodeFactory, shared_node: NodeProcess) -> Iterator[NodeProcess]:
    """The module's shared node, empty (DEBUG FLUSHALL), default config."""
    # Attach the shared node's log to the report if the test fails.
    request.node.stash.setdefault(_FACTORIES, []).append(shared_factory)
    if not shared_node.is_alive():
        shared_node.start()
    with shared_node.raw() as r:
        assert r.call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    try:
        yield shared_node
    finally:
        shared_node._close_clients()


def addjob(conn, queue="q", body="body", *opts) -> bytes:
    """ADDJOB on a redis-py client, returning the id as bytes."""
    jid = conn.execute_command("ADDJOB", queue, body, 0, *opts)
    assert JOB_ID_RE.match(jid), jid
    return jid


def show(conn, jid) -> dict | None:
    """SHOW as a dict (None for an unknown job)."""
    reply = conn.execute_command("SHOW", jid)
    if reply is None:
        return None
    assert isinstance(reply, list) and len(reply) == 30, reply
    return {reply[i].decode(): reply[i + 1] for i in range(0, 30, 2)}
