"""The SDK's distribution alone, in a fresh venv beside the newest redis-py
and aiohttp that resolve (no constraints: its ranges only), used against a
node of this checkout: what an application with its own dependencies gets."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from tests.harness import NodeProcess

from .conftest import Dists

pytestmark = pytest.mark.timeout(1800)

SCRIPT = """if True:
    import asyncio, json, sys
    from importlib.metadata import version
    from importlib.util import find_spec
    from disquette import AsyncClient, Client
    import disquette.dispatch            # the `disquette dispatch` command's aiohttp side

    addr = sys.argv[1]
    c = Client(addr)
    jid = c.add_job("alone", {"n": "sync"})
    (job,) = c.get_jobs("alone", timeout_ms=5000)
    assert (job.id, job.body) == (jid, {"n": "sync"}), job
    job.ack()

    async def main():
        async with AsyncClient(addr) as ac:
            jid = await ac.add_job("alone", {"n": "async"})
            (job,) = await ac.get_jobs("alone", timeout_ms=5000)
            assert (job.id, job.body) == (jid, {"n": "async"}), job
            await job.ack()
    asyncio.run(main())

    print(json.dumps({
        "versions": {name: version(name) for name in ("disquette", "redis", "aiohttp")},
        "node_packages": [p for p in ("server", "broker", "cluster", "protocol", "chaos")
                          if find_spec(p) is not None],
    }))
"""


def test_the_sdk_alone_beside_the_newest_redis_py_and_aiohttp(dists: Dists, make_venv,
                                                                node: NodeProcess):
    venv = make_venv("sdk-alone")
    venv.pip_install("--upgrade", str(dists.sdk), "redis", "aiohttp", constrained=False)
    out = json.loads(venv.run([venv.python, "-c", SCRIPT, node.addr]).stdout)
    assert out["node_packages"] == []
    assert out["versions"]["disquette"] == dists.version
    # The ranges' lower bounds are the versions tested (constraints.txt): the
    # newest that resolve are those or later.
    assert Version(out["versions"]["redis"]) >= Version("8.1.0")
    assert Version(out["versions"]["aiohttp"]) >= Version("3.14.5")
    assert venv.compilers_called() == ""
    with node.client(protocol=2) as r:
        assert r.execute_command("QLEN", "alone") == 0
