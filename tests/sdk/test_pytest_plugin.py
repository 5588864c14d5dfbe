"""The pytest plugin (disquette/pytest_plugin.py) as a user meets it: a test
project of their own, outside the package, run by pytest in a subprocess with
the plugin loaded by ``-p disquette.pytest_plugin`` or by the installed
``pytest11`` entry point.  Its tests start real nodes and clusters through the
fixtures and record what they saw (pids, ports, data dirs); after the run this
file checks that every node is gone, its ports free and its dir removed."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from disquette.testing import can_bind
from tests.harness import REPO_ROOT

RUN_TIMEOUT = 300.0     # a guard against a hang: a few node starts on a loaded machine

# The user's conftest: every test calls record(...) with its nodes; at session
# end (after every fixture's teardown) it notes which recorded nodes still run,
# so a node stopped only by the death of pytest would be caught.
RECORDER = '''
import json, os
from pathlib import Path

SEEN = Path(__file__).with_name("seen.jsonl")

def record(test, *nodes):
    with SEEN.open("a") as f:
        for n in nodes:
            f.write(json.dumps({"test": test, "pid": n.pid, "port": n.port,
                                "dir": str(n.dir)}) + "\\n")

def pytest_sessionfinish(session):
    alive = []
    for line in SEEN.read_text().splitlines() if SEEN.exists() else []:
        pid = json.loads(line)["pid"]
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    Path(__file__).with_name("alive_at_end.json").write_text(json.dumps(alive))
'''


def run_user_tests(project: Path, files: dict[str, str], *args: str,
                   plugin: bool = True, extra_path: str | None = None
                   ) -> subprocess.CompletedProcess[str]:
    """Write the user's project and run pytest on it, as its own process."""
    project.mkdir(parents=True, exist_ok=True)
    files = {"pytest.ini": "[pytest]\n", "conftest.py": RECORDER, **files}
    for name, text in files.items():
        (project / name).write_text(textwrap.dedent(text))
    path = [str(REPO_ROOT), *([extra_path] if extra_path else []), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    if plugin:
        # -p alone: none of this venv's other plugins (nor an installed copy of ours).
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            *(["-p", "disquette.pytest_plugin"] if plugin else []), *args]
    res = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    res.stdout += res.stderr
    return res


def seen(project: Path) -> list[dict]:
    return [json.loads(line) for line in (project / "seen.jsonl").read_text().splitlines()]


def assert_all_gone(project: Path) -> None:
    """Every node the run started was stopped by its teardown (not by the end
    of pytest), and its ports and data dir are free again."""
    nodes = seen(project)
    assert nodes
    assert json.loads((project / "alive_at_end.json").read_text()) == []
    for n in nodes:
        with pytest.raises(ProcessLookupError):
            os.kill(n["pid"], 0)
        assert can_bind(n["port"]) and can_bind(n["port"] + 10000), n
        assert not Path(n["dir"]).exists(), n


def passed(res: subprocess.CompletedProcess[str], count: int) -> None:
    assert res.returncode == 0 and f"{count} passed" in res.stdout, res.stdout


def test_node_cluster_and_factory_fixtures_on_real_nodes(tmp_path: Path) -> None:
    project = tmp_path / "userproj"
    res = run_user_tests(project, {"test_user.py": '''
        import asyncio
        from disquette import Client
        from conftest import record

        def test_node(disquette_node):
            record("node", disquette_node)
            assert disquette_node.port != 7711
            assert disquette_node.addr == f"127.0.0.1:{disquette_node.port}"
            assert isinstance(disquette_node.client, Client)
            jid = disquette_node.client.add_job("emails", {"to": 42})
            [job] = disquette_node.client.get_jobs("emails", timeout_ms=5000)
            assert (job.id, job.body) == (jid, {"to": 42})
            assert job.ack() == 1

        def test_async_client(disquette_node):
            record("async", disquette_node)
            async def produce():
                async with disquette_node.async_client() as c:
                    return await c.add_job("emails", b"raw")
            jid = asyncio.run(produce())
            assert disquette_node.client.show(jid)["body"] == b"raw"

        def test_cluster(disquette_cluster):
            record("cluster", *disquette_cluster.nodes)
            assert len({n.port for n in disquette_cluster.nodes}) == 3
            hello = disquette_cluster.client.hello()
            assert sorted(n.addr for n in hello.nodes) == sorted(disquette_cluster.addrs)
            assert {n.priority for n in hello.nodes} == {1}
            first, second, third = disquette_cluster.nodes
            jid = first.client.add_job("emails", {"to": 7}, replicate=3)
            assert third.client.show(jid) is not None       # replicated, synchronously
            [job] = third.client.get_jobs("emails", timeout_ms=5000)   # federation
            assert job.id == jid

        def test_factory(disquette_factory):
            node = disquette_factory.node(appendonly=True)
            small = disquette_factory.cluster(2, config=["maxmemory-policy allkeys-lru"])
            record("factory", node, *small.nodes)
            with node.admin() as r:
                assert r.execute_command("CONFIG", "GET", "appendonly")[1] == b"yes"
            jid = node.client.add_job("emails", {"to": 1})
            node.kill()
            node.start()                                    # same port, same dir
            assert node.client.show(jid) is not None        # from the AOF
            assert len(small.client.hello().nodes) == 2
            with small.nodes[1].admin() as r:
                assert r.execute_command("CONFIG", "GET", "maxmemory-policy")[1] == b"allkeys-lru"

        def test_fresh_node_for_each_test(disquette_node):
            record("fresh", disquette_node)
            assert disquette_node.client.qlen("emails") == 0
    '''})
    passed(res, 5)
    nodes = seen(project)
    # Function scope: every test had nodes of its own.
    assert len({n["pid"] for n in nodes}) == len(nodes) == 9
    assert_all_gone(project)


def test_shared_scope_server_and_config_options(tmp_path: Path) -> None:
    """ini: one node and one cluster for the whole session, emptied before
    each test and started again after a test killed one; the server command
    and the directives given on the command line and in the ini."""
    project = tmp_path / "userproj"
    launcher = project / "launch.py"     # records each start, then is the server
    res = run_user_tests(project, {
        "pytest.ini": """
            [pytest]
            disquette_scope = session
            disquette_config =
                appendonly yes
        """,
        "launch.py": f'''
            import os, sys
            with open(os.path.join({str(project)!r}, "launches"), "a") as f:
                f.write("x\\n")
            os.execv(sys.executable, [sys.executable, "-m", "server", *sys.argv[1:]])
        ''',
        "test_shared.py": '''
            from conftest import record

            def config(node, name):
                with node.admin() as r:
                    return r.execute_command("CONFIG", "GET", name)[1].decode()

            def test_1_leaves_a_job_and_kills(disquette_node, disquette_cluster):
                record("1", disquette_node, *disquette_cluster.nodes)
                assert config(disquette_node, "appendonly") == "yes"        # ini
                assert config(disquette_node, "maxmemory-policy") == "volatile-lru"  # option
                disquette_node.client.add_job("left", b"over")
                disquette_cluster.client.add_job("left", b"over")
                disquette_node.kill()
                disquette_cluster.nodes[1].kill()

            def test_2_same_nodes_running_and_empty(disquette_node, disquette_cluster):
                record("2", disquette_node, *disquette_cluster.nodes)
                assert disquette_node.client.qlen("left") == 0
                assert all(n.client.qlen("left") == 0 for n in disquette_cluster.nodes)
                assert len(disquette_cluster.client.hello().nodes) == 3
        ''',
    }, "--disquette-server", f"{sys.executable} {launcher}",
       "--disquette-config", "maxmemory-policy volatile-lru")
    passed(res, 2)
    nodes = seen(project)
    by_test = {t: [(n["port"], n["dir"]) for n in nodes if n["test"] == t] for t in "12"}
    assert by_test["1"] == by_test["2"]          # the same 4 nodes, same ports and dirs
    # 4 starts, and the 2 killed nodes started again: all through the launcher.
    assert (project / "launches").read_text().count("x") == 6
    assert_all_gone(project)


def test_a_bad_scope_is_a_usage_error(tmp_path: Path) -> None:
    res = run_user_tests(tmp_path / "userproj", {
        "pytest.ini": "[pytest]\ndisquette_scope = forever\n",
        "test_x.py": "def test_x(disquette_node):\n    pass\n"})
    assert res.returncode != 0 and "disquette_scope = 'forever'" in res.stdout, res.stdout


def test_a_failed_test_shows_its_nodes_log(tmp_path: Path) -> None:
    res = run_user_tests(tmp_path / "userproj", {"test_fail.py": '''
        def test_fails(disquette_node):
            assert disquette_node.client.qlen("q") == 1
    '''})
    assert res.returncode == 1, res.stdout
    assert re.search(r"disquette node 127\.0\.0\.1:\d+ -+\n=== disquette\.testing: ", res.stdout), \
        res.stdout


def test_the_installed_entry_point_loads_it(tmp_path: Path) -> None:
    """The SDK pyproject's pytest11 entry point, as an installed distribution
    declares it: the fixtures without -p, and -p with it loads it once."""
    entry = tomllib.loads((REPO_ROOT / "sdk" / "pyproject.toml").read_text())
    points = entry["project"]["entry-points"]["pytest11"]
    site = tmp_path / "site"
    dist = site / "disquette_plugin_check-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: disquette-plugin-check\n"
                                   "Version: 0\n")
    (dist / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    user = {"test_ep.py": '''
        from conftest import record

        def test_node(disquette_node):
            record("ep", disquette_node)
            assert disquette_node.client.ping()
    '''}
    project = tmp_path / "userproj"
    res = run_user_tests(project, user, plugin=False, extra_path=str(site))
    passed(res, 1)
    assert_all_gone(project)
    # Both ways at once (a checkout's -p, the venv's entry point): loaded once.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(site)]))
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-p", "disquette.pytest_plugin", "--collect-only"],
                         cwd=project, env=env, capture_output=True, text=True,
                         timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert res.returncode == 0 and "1 test collected" in res.stdout, res.stdout + res.stderr


def test_the_docs_examples_pass(tmp_path: Path) -> None:
    """The test functions shown in README.md and docs/sdk.md, run as a user
    would run them."""
    blocks = []
    for page in ("README.md", "docs/sdk.md"):
        text = (REPO_ROOT / page).read_text()
        blocks += [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                   if re.search(r"def test_\w+\(disquette_", b)]
    assert len(blocks) == 2
    code = "\n\n".join(blocks)
    count = len(re.findall(r"^def test_", code, re.M))
    res = run_user_tests(tmp_path / "userproj", {"test_docs.py": code})
    passed(res, count)


def test_no_fixture_of_the_plugin_clashes_with_the_projects() -> None:
    """With disquette installed, the plugin loads in this project's own test
    runs too: none of its fixtures may share a name with ours."""
    def fixtures(path: Path) -> set[str]:
        tree = ast.parse(path.read_text())
        return {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                and any("fixture" in ast.unparse(d) for d in f.decorator_list)}

    plugin = fixtures(REPO_ROOT / "disquette" / "pytest_plugin.py")
    assert {"disquette_node", "disquette_cluster", "disquette_factory"} <= plugin
    ours = set().union(*(fixtures(p) for p in (REPO_ROOT / "tests").rglob("*.py")))
    assert not plugin & ours


def test_a_node_is_known_as_itself_without_proc(monkeypatch, tmp_path: Path) -> None:
    """Where /proc cannot tell whose listener answers, a node is ours when its
    CONFIG GET dir is its own dir; a server on that port with another dir is not."""
    from disquette import testing

    monkeypatch.setattr(testing, "pid_listens_on", lambda pid, port: None)
    with testing.DisquetteNode(dir=tmp_path / "a", start_timeout=30) as node:
        assert node.client.ping()
        assert node._serves_our_dir() is True
        other = testing.DisquetteNode(port=node.port, dir=tmp_path / "b")
        assert other._serves_our_dir() is False
