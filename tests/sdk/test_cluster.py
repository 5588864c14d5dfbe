"""Cluster awareness against real 3-node clusters: learning the nodes with
HELLO, preferring them by priority, -LEAVING, the consumer's move to the node
producing its jobs, and failover when the node under a producer and a worker
is killed in the middle of 10,000 jobs."""

from __future__ import annotations

import asyncio
import threading
from typing import Iterator

import pytest

from disquette import (
    AsyncClient, Client, DisqueConnectionError, ReplyError, ReplyLostError, Worker,
)
from tests.conftest import _FACTORIES
from tests.harness import (
    NODE_WAIT_MS, WAIT_TIMEOUT, NodeFactory, NodeProcess, module_factory, wait_until,
)

pytestmark = pytest.mark.xdist_group("sdk_cluster")
NODE_TIMEOUT_MS = 1500


@pytest.fixture(scope="module")
def cluster_factory(tmp_path_factory) -> Iterator[NodeFactory]:
    yield from module_factory(tmp_path_factory, "sdkcluster")


@pytest.fixture(scope="module")
def shared_cluster(cluster_factory: NodeFactory) -> list[NodeProcess]:
    return cluster_factory.cluster(3, cluster_node_timeout=NODE_TIMEOUT_MS)


@pytest.fixture
def trio(request, cluster_factory, shared_cluster) -> list[NodeProcess]:
    """The module's 3 joined nodes, flushed, none leaving."""
    request.node.stash.setdefault(_FACTORIES, []).append(cluster_factory)
    for n in shared_cluster:
        r = n.client()
        r.execute_command("CLUSTER", "LEAVING", "no")
        r.execute_command("DEBUG", "FLUSHALL")
    return shared_cluster


def myid(n: NodeProcess) -> str:
    return n.client().execute_command("CLUSTER", "MYID").decode()


def test_learns_the_cluster_from_one_node(trio):
    a, b, c = trio
    client = Client(a.addr)
    assert client.nodes == [a.addr]  # nothing learned before the first command
    client.qlen("q")
    assert client.node == a.addr and client.node_id == myid(a)
    assert sorted(client.nodes) == sorted(n.addr for n in trio)
    hello = client.hello()
    assert {n.id for n in hello.nodes} == {myid(n) for n in trio}
    assert all(n.priority == 1 for n in hello.nodes)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_moves_off_a_leaving_node(kind, trio):
    """HELLO priority 100 (leaving): the client prefers another node; a
    blocking GETJOB answered -LEAVING goes to another node and gets the job."""
    from tests.sdk.conftest import make_api

    a, b, c = trio
    consumer = make_api(kind, [a.addr, b.addr, c.addr])
    consumer.qlen("q")
    assert consumer.node == a.addr
    a.client().execute_command("CLUSTER", "LEAVING", "yes")
    jid = Client(b.addr).add_job("q", "hello", replicate=1)
    (job,) = consumer.get_jobs("q", timeout_ms=NODE_WAIT_MS)  # -LEAVING from a, then b or c
    assert job.id == jid and consumer.node != a.addr
    consumer.hello()
    assert consumer.node != a.addr and consumer.nodes[-1] == a.addr  # a ranks last
    job.ack()
    consumer.close()


def test_consumer_moves_to_the_producing_node(trio):
    a, b, c = trio
    producer = Client(b.addr)
    ids = set(producer.add_jobs([("q", i) for i in range(120)], replicate=1))
    consumer = Client(a.addr, switch_min_jobs=50)
    got: set[str] = set()
    while consumer.switches == 0 and len(got) < 120:
        # Federation from b (a NEEDJOBS broadcast may need its 2 s, 4 s retries).
        jobs = consumer.get_jobs("q", count=10, timeout_ms=NODE_WAIT_MS)
        assert jobs, "no job came through federation"
        assert all(j.node_prefix == myid(b)[:8] for j in jobs)
        got.update(j.id for j in jobs)
        consumer.ack_job(*[j.id for j in jobs])
    assert consumer.switches == 1 and consumer.node == b.addr
    rest = consumer.get_jobs("q", count=200, nohang=True)  # served by b itself now
    assert rest and all(j.node == b.addr for j in rest)
    assert got | {j.id for j in rest} == ids


def test_consumer_stays_when_jobs_are_local(trio):
    a, *_ = trio
    c = Client(a.addr, switch_min_jobs=10)
    c.add_jobs([("q", i) for i in range(30)], replicate=1)
    while c.get_jobs("q", count=5, nohang=True):
        pass
    assert c.switches == 0 and c.node == a.addr


def test_failover_kill_9_mid_stream(node_factory):
    """kill -9 the node a producer and a worker are connected to, in the
    middle of 10,000 jobs: the producer goes on through another node, every
    job whose add returned an id is processed at least once, and nothing is
    left queued."""
    nodes = node_factory.cluster(3, cluster_node_timeout=NODE_TIMEOUT_MS)
    addrs = [n.addr for n in nodes]
    victim = nodes[0]
    total, kill_after = 10_000, 3_000

    processed: set[str] = set()

    async def handler(job):
        processed.add(job.id)

    worker = Worker(Client(addrs), "q", handler, concurrency=64)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()

    added: list[str] = []
    lost: list[ReplyLostError] = []
    refused: list[Exception] = []

    async def produce() -> str:
        async with AsyncClient(addrs) as producer:
            await producer.ping()
            first_node = producer.node
            queue = iter(range(total))

            async def one_stream() -> None:
                for i in queue:
                    if len(added) == kill_after and victim.is_alive():
                        victim.kill()
                    try:
                        added.append(await producer.add_job("q", i, replicate=2, retry=2,
                                                            timeout_ms=5000))
                    except ReplyLostError as e:
                        lost.append(e)
                    except (ReplyError, DisqueConnectionError) as e:
                        refused.append(e)

            await asyncio.gather(*(one_stream() for _ in range(16)))
            return first_node

    try:
        first_node = asyncio.run(produce())
        assert first_node == victim.addr and worker.aclient.node != victim.addr
        assert not victim.is_alive()
        assert len(added) + len(lost) + len(refused) == total
        assert len(added) > total * 0.9, (len(lost), refused[:3])
        definite = set(added)
        wait_until(lambda: definite <= processed, interval=0.2,
                   message=lambda: f"{len(definite - processed)} acknowledged jobs "
                                   f"not processed")
        survivors = [n.client() for n in nodes[1:]]
        wait_until(lambda: all(r.execute_command("QLEN", "q") == 0 for r in survivors),
                   interval=0.2)
    finally:
        worker.stop()
        thread.join(WAIT_TIMEOUT)
    assert not thread.is_alive()
