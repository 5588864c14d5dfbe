"""``python -m chaos run --toxiproxy URL``: the scenarios driven through a
Toxiproxy server already running (here our ``python -m chaos.proxy``, started
apart, standing in for a real Toxiproxy): the run creates its proxies there,
its faults go through that server's API, it leaves the server as it found it,
and the verdict is the same as with its own proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import requests

from chaos.history import read_history
from tests.harness import REPO_ROOT

pytestmark = pytest.mark.xdist_group("chaos-run")

SEED = 5


def test_a_run_through_a_running_toxiproxy_server(proxy_server, tmp_path) -> None:
    url = proxy_server.url
    # Someone else's proxy on the same server must survive the run.
    requests.post(f"{url}/proxies", json={"name": "bystander", "listen": "127.0.0.1:0",
                                          "upstream": "127.0.0.1:9"}, timeout=10)
    out = tmp_path / "runs"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", "--scenario", "isolated", "--nodes", "3",
         "--seconds", "6", "--seed", str(SEED), "--rate", "20", "--toxiproxy", url,
         "--out", str(out)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen_links: set[str] = set()
    seen_fault = False
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        proxies = requests.get(f"{url}/proxies", timeout=10).json()
        links = {name: p for name, p in proxies.items() if name != "bystander"}
        seen_links |= set(links)
        seen_fault |= any(not p["enabled"] or p["toxics"] for p in links.values())
        time.sleep(0.05)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output[-4000:]
    # Its 6 directed links were proxies of this server, and the cut went through it.
    assert seen_links == {f"n{a}-n{b}" for a in (1, 2, 3) for b in (1, 2, 3) if a != b}
    assert seen_fault, "no proxy of the server was ever disabled or given a toxic"
    # Gone afterwards; the bystander untouched.
    assert list(requests.get(f"{url}/proxies", timeout=10).json()) == ["bystander"]
    folder = out / f"isolated-seed{SEED}"
    report = json.loads((folder / "report.json").read_text())
    assert report["figures"]["valid"] is True and report["figures"]["lost"] == 0
    history = read_history(folder / "history.jsonl")
    assert url in json.dumps(history.meta)
