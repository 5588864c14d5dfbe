"""Both distributions installed from their wheels into a fresh venv, with no
compiler on PATH and the checkout nowhere on sys.path: the node starts from
its console script, compiled; the SDK adds, takes and acks a job; a PySpark
job writes jobs and reads a node's history; every version shown agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from disquette import __version__
from disquette.testing import ServerProcess

from .conftest import Dists, Venv

pytestmark = pytest.mark.timeout(1800)

HERE = Path(__file__).resolve().parent
# What the node may import of the SDK: the modules both distributions share
# (pyproject.toml's import contract says the same for the code).
SHARED = ["disquette", "disquette._version", "disquette.aof_codec", "disquette.job_record"]


class InstalledNode(ServerProcess):
    """A node started by the installed console script, in the venv's
    environment only (not this test run's, whose PYTHONPATH may name the
    checkout)."""

    def environment(self) -> dict[str, str]:
        return {**self.env, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def installed(dists: Dists, make_venv) -> Venv:
    venv = make_venv("both")
    # The node's wheel, the SDK's with its `spark` extra (the file named
    # alone too: pip 23.2, as Python 3.11 ships it, does not take
    # `file.whl[spark]` for the node's `disquette==` requirement); their
    # dependencies at the versions `make` installs (pip's cache holds them).
    venv.pip_install(str(dists.node), str(dists.sdk), f"{dists.sdk}[spark]", constrained=True)
    return venv


@pytest.fixture(scope="module")
def node(installed: Venv, tmp_path_factory) -> ServerProcess:
    n = InstalledNode([installed.bin("disquette-server")],
                      args=["--appendonly", "yes", "--aof-history", "yes",
                            "--appendfsync", "always"],
                      dir=tmp_path_factory.mktemp("installed-node"), env=installed.env)
    n.start()
    yield n
    n.stop()


def info(n: ServerProcess) -> dict:
    with redis.Redis(n.host, n.port, protocol=2) as r:
        return r.info("server")


def test_the_node_runs_its_compiled_core_from_the_venv(installed: Venv, node: ServerProcess):
    fields = info(node)
    assert fields["compiled_core"] == "yes"
    assert fields["resp_parser"] == "c"
    # The compiled core it runs is the venv's, not the checkout's.
    maps = Path(f"/proc/{node.pid}/maps")
    if maps.exists():
        loaded = {line.split()[-1] for line in maps.read_text().splitlines()
                  if "__mypyc" in line}
        assert loaded and all(p.startswith(str(installed.dir)) for p in loaded), loaded
    assert installed.compilers_called() == ""


def test_every_version_shown_is_the_packages(dists: Dists, installed: Venv, node: ServerProcess):
    assert dists.version == __version__
    shown = {
        "disquette --version": installed.run([installed.bin("disquette"), "--version"]).stdout,
        "disquette-server --version":
            installed.run([installed.bin("disquette-server"), "--version"]).stdout,
        "disquette.__version__": installed.run(
            [installed.python, "-c", "import disquette; print(disquette.__version__)"]).stdout,
        "the distributions' metadata": installed.run(
            [installed.python, "-c", "from importlib.metadata import version; "
             "print(version('disquette'), version('disquette-server'))"]).stdout,
        "INFO disquette_version": str(info(node)["disquette_version"]),
    }
    for where, text in shown.items():
        words = text.replace("v=", " ").split()
        assert __version__ in words, (where, text)
        assert not [w for w in words if w[:1].isdigit() and w != __version__
                    and "rc" not in w], (where, text)   # (but Disque's 1.0-rc1)


def test_the_sdk_adds_takes_and_acks_a_job(installed: Venv, node: ServerProcess):
    script = """if True:
        import sys
        from disquette import Client
        c = Client(sys.argv[1])
        jid = c.add_job("wheel", {"n": 1})
        (job,) = c.get_jobs("wheel", timeout_ms=5000)
        assert (job.id, job.body) == (jid, {"n": 1}), job
        job.ack()
        print(jid)
    """
    jid = installed.run([installed.python, "-c", script, node.addr]).stdout.strip()
    with redis.Redis(node.host, node.port, protocol=2) as r:
        shown = r.execute_command("SHOW", jid)
        assert shown is None or dict(zip(shown[::2], shown[1::2]))[b"state"] == b"acked"
        assert r.execute_command("QLEN", "wheel") == 0


def test_a_spark_job_writes_jobs_and_reads_the_history(installed: Venv, node: ServerProcess):
    rows = 20
    out = installed.run([installed.python, str(HERE / "spark_job.py"), node.addr,
                         "spark-wheel", str(node.dir), str(rows)]).stdout
    added = json.loads(out.strip().splitlines()[-1])["added"]
    assert added == sorted(f"body-{i}" for i in range(rows))
    with redis.Redis(node.host, node.port, protocol=2) as r:
        assert r.execute_command("QLEN", "spark-wheel") == rows
    assert installed.compilers_called() == ""


def test_site_packages_hold_what_each_distribution_ships(installed: Venv):
    script = """if True:
        import json
        from importlib.metadata import distribution
        print(json.dumps({name: sorted({f.parts[0] for f in distribution(name).files
                                        if f.parts[0] not in ("..", "__pycache__")
                                        and not f.parts[0].endswith(".dist-info")})
                          for name in ("disquette", "disquette-server")}))
    """
    top = json.loads(installed.run([installed.python, "-c", script]).stdout)
    assert top["disquette"] == ["disquette", "pyspark_disquette.py", "pyspark_disquette_aof.py"]
    native = [t for t in top["disquette-server"] if "__mypyc." in t]
    assert len(native) == 1, top["disquette-server"]
    assert sorted(set(top["disquette-server"]) - set(native)) == [
        "broker", "chaos", "cluster", "protocol", "server"]


def test_the_node_imports_of_the_sdk_only_what_both_share(installed: Venv):
    script = """if True:
        import json, sys
        import server.main, server.process, server.check_aof
        print(json.dumps({"sdk": sorted(m for m in sys.modules if m.split(".")[0] == "disquette"),
                          "redis": "redis" in sys.modules, "server": server.main.__file__}))
    """
    seen = json.loads(installed.run([installed.python, "-c", script]).stdout)
    assert seen["sdk"] == SHARED
    assert not seen["redis"]
    assert seen["server"].startswith(str(installed.dir))
