"""pytest fixtures for testing your own code against real Disquette nodes.

* ``disquette_node``: one node (:class:`~disquette.testing.DisquetteNode`);
* ``disquette_cluster``: 3 joined nodes (:class:`~disquette.testing.DisquetteCluster`);
* ``disquette_factory``: more of either, each with its own config, inside one test.

Each node is the real server as a subprocess on a free loopback port, awaited
until it answers (a cluster: until every node sees every other), stopped and
its data dir removed at teardown.  ``.client`` is a ready ``disquette.Client``,
``.async_client()`` an ``AsyncClient``, ``.addr`` / ``.addrs`` / ``.url`` the
addresses.

Installing disquette registers this plugin (the ``pytest11`` entry point);
``-p disquette.pytest_plugin`` loads it from a checkout.  Options, on the
command line or as ini keys (pytest.ini, or ``[tool.pytest.ini_options]``):

* ``--disquette-server`` / ``disquette_server``: the server command (default
  ``python -m server`` with this interpreter);
* ``--disquette-config`` / ``disquette_config``: config directives for every
  node, one ``name value`` per line (the option may be repeated);
* ``--disquette-scope`` / ``disquette_scope``: how long ``disquette_node`` and
  ``disquette_cluster`` live: ``function`` (the default: fresh nodes for each
  test), ``class``, ``module``, ``package`` or ``session`` (shared nodes,
  emptied with DEBUG FLUSHALL and restarted if a test stopped one, before
  each test that asks for them).
"""

from __future__ import annotations

import shlex
from typing import Any, Generator, Iterator, Literal

import pytest

from .testing import DisquetteCluster, DisquetteNode

Scope = Literal["function", "class", "module", "package", "session"]
SCOPES: tuple[Scope, ...] = ("function", "class", "module", "package", "session")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("disquette", "Disquette nodes for tests (disquette.pytest_plugin)")
    group.addoption("--disquette-server", dest="disquette_server", default=None,
                    metavar="COMMAND",
                    help="command starting a node (default: python -m server)")
    group.addoption("--disquette-config", dest="disquette_config", action="append",
                    default=[], metavar="'NAME VALUE'",
                    help="a config directive for every node (repeatable)")
    group.addoption("--disquette-scope", dest="disquette_scope", default=None,
                    choices=SCOPES,
                    help="scope of disquette_node and disquette_cluster (default: function)")
    parser.addini("disquette_server", "command starting a node (default: python -m server)",
                  default="")
    parser.addini("disquette_config", "config directives for every node, one per line",
                  type="linelist", default=[])
    parser.addini("disquette_scope",
                  "scope of disquette_node and disquette_cluster (default: function)",
                  default="function")


def server_command(config: pytest.Config) -> list[str] | None:
    """The configured server command, or None for the default."""
    text = config.getoption("disquette_server") or config.getini("disquette_server")
    return shlex.split(text) if text else None


def node_config(config: pytest.Config) -> list[str]:
    """The ini's directives, then the command line's (the later win)."""
    return [*config.getini("disquette_config"), *config.getoption("disquette_config")]


def node_scope(fixture_name: str, config: pytest.Config) -> Scope:
    """The scope of ``disquette_node`` and ``disquette_cluster`` (pytest asks
    when it collects them)."""
    wanted = config.getoption("disquette_scope") or config.getini("disquette_scope")
    for scope in SCOPES:
        if wanted == scope:
            return scope
    raise pytest.UsageError(f"disquette_scope = {wanted!r}: expected one of {SCOPES}")


class DisquetteFactory:
    """What ``disquette_factory`` gives a test: ``node(...)`` and
    ``cluster(size=3, ...)`` start nodes with the run's server command and
    config plus their own (``config=["appendonly yes"]``, or keywords such as
    ``appendonly=True``); all are closed when the test ends."""

    def __init__(self, command: list[str] | None, config: list[str]) -> None:
        self.command = command
        self.config = config
        self.started: list[DisquetteNode | DisquetteCluster] = []

    def node(self, *, config: list[str] | tuple[str, ...] = (),
             command: list[str] | str | None = None, **options: Any) -> DisquetteNode:
        """A started node; ``options`` are DisquetteNode's (``port=``...) and directives."""
        n = DisquetteNode(command or self.command, config=[*self.config, *config], **options)
        self.started.append(n)
        return n.start()

    def cluster(self, size: int = 3, *, config: list[str] | tuple[str, ...] = (),
                command: list[str] | str | None = None, **options: Any) -> DisquetteCluster:
        """``size`` nodes, met and ready."""
        c = DisquetteCluster(size, command or self.command, config=[*self.config, *config],
                             **options)
        self.started.append(c)
        return c.start()

    def nodes(self) -> list[DisquetteNode]:
        out: list[DisquetteNode] = []
        for s in self.started:
            out += s.nodes if isinstance(s, DisquetteCluster) else [s]
        return out

    def close(self) -> None:
        for s in reversed(self.started):
            s.close()


@pytest.fixture(scope=node_scope)
def disquette_node(pytestconfig: pytest.Config) -> Iterator[DisquetteNode]:
    """A real node on a free loopback port: ``.client`` (a ``disquette.Client``),
    ``.async_client()``, ``.addr``, ``.url``, ``.stop()``, ``.kill()``,
    ``.start()``.  Function-scoped unless ``disquette_scope`` says otherwise."""
    node = DisquetteNode(server_command(pytestconfig), config=node_config(pytestconfig))
    try:
        yield node.start()
    finally:
        node.close()


@pytest.fixture(scope=node_scope)
def disquette_cluster(pytestconfig: pytest.Config) -> Iterator[DisquetteCluster]:
    """Three real nodes, met and ready: ``.nodes``, ``.client`` (knows every
    node), ``.async_client()``, ``.addrs``, ``.url``.  Function-scoped unless
    ``disquette_scope`` says otherwise."""
    cluster = DisquetteCluster(3, server_command(pytestconfig), config=node_config(pytestconfig))
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def disquette_factory(pytestconfig: pytest.Config) -> Iterator[DisquetteFactory]:
    """Start nodes and clusters with their own config inside one test:
    ``disquette_factory.node(appendonly=True)``, ``disquette_factory.cluster(5)``."""
    factory = DisquetteFactory(server_command(pytestconfig), node_config(pytestconfig))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(autouse=True)
def _disquette_shared_nodes_emptied(request: pytest.FixtureRequest) -> None:
    """Shared nodes (a scope wider than function) start each test empty and
    whole: a node a test stopped is started again, then DEBUG FLUSHALL.
    Autouse, so it runs before the test's other function fixtures (which may
    add jobs); it does nothing for a test that uses no shared node."""
    if node_scope("", request.config) == "function":
        return
    if "disquette_node" in request.fixturenames:
        node: DisquetteNode = request.getfixturevalue("disquette_node")
        if not node.is_running():
            node.start()
        node.flush()
    if "disquette_cluster" in request.fixturenames:
        cluster: DisquetteCluster = request.getfixturevalue("disquette_cluster")
        cluster.ensure_running()
        cluster.flush()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report shows the tail of each of its nodes' logs (the
    data dirs are gone after teardown)."""
    report = yield
    if report.failed:
        for node in _nodes_of(item):
            report.sections.append((f"disquette node {node.addr}", node.log_tail(40)
                                    or "(empty log)"))
    return report


def _nodes_of(item: pytest.Item) -> list[DisquetteNode]:
    nodes: list[DisquetteNode] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, DisquetteNode):
            nodes.append(value)
        elif isinstance(value, DisquetteCluster):
            nodes += value.nodes
        elif isinstance(value, DisquetteFactory):
            nodes += value.nodes()
    return nodes
