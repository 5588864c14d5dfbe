"""Shared fixtures: real nodes as subprocesses (see tests/harness.py), and a
whole node in this process for what crosses no socket (server/sim/inprocess.py)."""

from __future__ import annotations

from typing import Callable, Iterator

import pytest

from server.sim.inprocess import InProcessNode
from tests.harness import NodeFactory, NodeProcess, pydisque_run as _pydisque_run, wait_until as _wait_until

_FACTORIES = pytest.StashKey[list[NodeFactory]]()


@pytest.fixture
def node_factory(request: pytest.FixtureRequest, tmp_path) -> Iterator[NodeFactory]:
    """``node_factory(*args, port=None, cmd=None, **directives)`` starts a node
    in ``tmp_path/node<i>``; ``node_factory.cluster(n, ...)`` starts n joined
    nodes.  Every node is stopped at teardown, whatever the test did."""
    factory = NodeFactory(tmp_path)
    request.node.stash.setdefault(_FACTORIES, []).append(factory)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture
def node(node_factory: NodeFactory) -> NodeProcess:
    """One fresh node with default config in its own tmp dir."""
    return node_factory()


@pytest.fixture
def inprocess() -> InProcessNode:
    """A whole node (Node, command table, Cluster, output driver) in this
    process on a virtual clock: ``inprocess.call(*args)`` returns the reply
    value, ``inprocess.resp(*args, proto=2|3)`` the bytes a client reads,
    ``inprocess.advance(ms)`` runs the timers. Strict: a bug raises. Any shell's
    tests (HTTP...) can drive it as that shell drives the process's node."""
    return InProcessNode()


@pytest.fixture
def wait_until() -> Callable[..., object]:
    """``wait_until(predicate, timeout=WAIT_TIMEOUT, interval=0.01, message=None, ignore=())``:
    the timeout (60 s) only guards against a hang; await the condition itself."""
    return _wait_until


@pytest.fixture
def pydisque_run() -> Callable[..., str]:
    """``pydisque_run(code, port, host="127.0.0.1", timeout=60.0) -> stdout``."""
    return _pydisque_run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """On failure, attach the tail of every node's log to the report."""
    report = yield
    if report.failed:
        for factory in item.stash.get(_FACTORIES, []):
            for n in factory.nodes:
                report.sections.append(
                    (f"node {n.addr} ({n.log_path})", n.log_tail(60) or "(empty log)")
                )
    return report
