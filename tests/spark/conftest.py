"""Fixtures for the PySpark tests: ONE local SparkSession for the whole run
(Spark starts in seconds, not milliseconds), a 3-node cluster per module.

``local[2,2]``: two task threads, and a failed task is tried twice, so a
test can force a task retry.  Every test in tests/spark is marked
``xdist_group("spark")`` so the session lives in one pytest worker.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from tests.conftest import _FACTORIES
from tests.harness import NodeFactory, NodeProcess, module_factory
from tests.spark.kit import local_spark

pyspark = pytest.importorskip("pyspark")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = local_spark("local[2,2]", "disquette-tests", **{
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"})
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def spark_factory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "spark")


@pytest.fixture(scope="module")
def cluster3(spark_factory: NodeFactory) -> list[NodeProcess]:
    return spark_factory.cluster(3)


@pytest.fixture
def cluster(request, spark_factory: NodeFactory, cluster3: list[NodeProcess]) -> list[NodeProcess]:
    """The module's 3-node cluster, every node emptied (DEBUG FLUSHALL) and
    no queue paused."""
    request.node.stash.setdefault(_FACTORIES, []).append(spark_factory)
    for n in cluster3:
        with n.raw() as r:
            assert r.call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    yield cluster3
    for n in cluster3:
        n._close_clients()


