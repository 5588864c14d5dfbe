"""``disquette dispatch`` as a subprocess against a real local HTTP endpoint
(aiohttp, in a thread of the test): 2xx acks, 500s and timeouts are retried
with backoff, then dead-lettered with the last status and response, and the
concurrency limit holds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter, defaultdict

import pytest
from aiohttp import web

from tests.harness import REPO_ROOT, WAIT_TIMEOUT, free_port, wait_until

CONCURRENCY = 4         # the dispatcher's limit in the /ok test


class Endpoint:
    """A webhook receiver: /ok (held until CONCURRENCY requests are in at
    once, then slow enough to see more), /fail (500),
    /slow (longer than the dispatcher's timeout), /flaky (500 twice per job)."""

    def __init__(self) -> None:
        self.port = free_port(bus_offset=0)
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[tuple[str, dict, bytes]] = []
        self.attempts: Counter = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.crowd = asyncio.Event()       # CONCURRENCY requests were in at once
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        jid = request.headers["X-Disquette-Job-Id"]
        self.attempts[jid] += 1
        self.received.append((request.path, dict(request.headers), body))
        kind = request.match_info["kind"]
        if kind == "ok":
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.in_flight >= CONCURRENCY:
                self.crowd.set()
            try:
                # Held until the dispatcher had CONCURRENCY requests in at
                # once (however slow the machine is to send them), then 0.1 s
                # each: more than the limit would be seen.
                await asyncio.wait_for(self.crowd.wait(), WAIT_TIMEOUT)
                await asyncio.sleep(0.1)
            finally:
                self.in_flight -= 1
            return web.Response(status=204)
        if kind == "fail":
            return web.Response(status=500, text=f"boom {self.attempts[jid]}")
        if kind == "slow":
            await asyncio.sleep(10)
            return web.Response(text="too late")
        if kind == "flaky":
            if self.attempts[jid] <= 2:
                return web.Response(status=503, text="busy")
            return web.Response(text="ok")
        return web.Response(status=404)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/{kind}", self.handle)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
        self.started.set()
        self.loop.run_forever()

    def __enter__(self) -> "Endpoint":
        self.thread.start()
        self.started.wait(WAIT_TIMEOUT)
        return self

    def __exit__(self, *exc) -> None:
        fut = asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop)
        fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def endpoint():
    with Endpoint() as e:
        yield e


def dispatch(node, queue: str, url: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "disquette", "dispatch", "--nodes", node.addr, "--queue", queue,
         "--url", url, "--poll-ms", "200", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=WAIT_TIMEOUT)
    assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def dead_letters(client, queue: str) -> list[dict]:
    return [json.loads(j[2]) for j in client.execute_command("QPEEK", queue, 100)]


def test_dispatch_acks_on_2xx_within_the_concurrency_limit(hnode, endpoint):
    c = hnode.client()
    bodies = [json.dumps({"n": i}).encode() for i in range(20)] + [b"\xff\x00raw"]
    ids = [c.execute_command("ADDJOB", "hooks", b, 0, "RETRY", 30).decode() for b in bodies]
    proc = dispatch(hnode, "hooks", f"{endpoint.url}/ok", "--concurrency", str(CONCURRENCY))
    try:
        wait_until(lambda: c.execute_command("INFO", "jobs")["registered_jobs"] == 0,
                   message=lambda: f"{len(endpoint.received)} received")
    finally:
        out = stop(proc)
    assert sorted(b for _, _, b in endpoint.received) == sorted(bodies), out[-2000:]
    assert endpoint.max_in_flight == CONCURRENCY        # the limit, and reached
    by_id = {h["X-Disquette-Job-Id"]: (h, b) for _, h, b in endpoint.received}
    assert set(by_id) == set(ids)
    h, b = by_id[ids[0]]
    assert (h["X-Disquette-Queue"], h["X-Disquette-Attempt"], h["Content-Type"]) == \
        ("hooks", "1", "application/json")
    assert by_id[ids[-1]][0]["Content-Type"] == "application/octet-stream"
    assert c.execute_command("QLEN", "hooks:dead") == 0


def test_dispatch_retries_with_backoff_then_dead_letters(hnode, endpoint):
    c = hnode.client()
    failing = c.execute_command("ADDJOB", "f", "will fail", 0, "RETRY", 60).decode()
    flaky = c.execute_command("ADDJOB", "fl", "works the third time", 0, "RETRY", 60).decode()
    procs = [dispatch(hnode, "f", f"{endpoint.url}/fail", "--max-attempts", "3",
                      "--backoff-base", "0.3"),
             dispatch(hnode, "fl", f"{endpoint.url}/flaky", "--max-attempts", "5",
                      "--backoff-base", "0.05")]
    try:
        wait_until(lambda: c.execute_command("QLEN", "f:dead") == 1)
        wait_until(lambda: endpoint.attempts[flaky] == 3)
        wait_until(lambda: c.execute_command("SHOW", flaky) is None)
    finally:
        for p in procs:
            stop(p)
    assert endpoint.attempts[failing] == 3
    attempts = [h["X-Disquette-Attempt"] for _, h, _ in endpoint.received
                if h["X-Disquette-Job-Id"] == failing]
    assert attempts == ["1", "2", "3"]
    [letter] = dead_letters(c, "f:dead")
    assert letter["id"] == failing and letter["queue"] == "f" and letter["attempts"] == 3
    assert letter["status"] == 500 and letter["response"] == "boom 3"
    assert letter["url"] == f"{endpoint.url}/fail" and letter["body"] == "will fail"
    assert letter["error"].startswith("WebhookError: HTTP 500")
    assert c.execute_command("SHOW", failing) is None          # acked once dead-lettered
    assert c.execute_command("QLEN", "fl:dead") == 0


def test_dispatch_timeout_is_a_failure(hnode, endpoint):
    c = hnode.client()
    jid = c.execute_command("ADDJOB", "s", "slow", 0, "RETRY", 60).decode()
    proc = dispatch(hnode, "s", f"{endpoint.url}/slow", "--timeout", "0.3",
                    "--max-attempts", "2", "--backoff-base", "0.05")
    try:
        wait_until(lambda: c.execute_command("QLEN", "s:dead") == 1)
    finally:
        stop(proc)
    [letter] = dead_letters(c, "s:dead")
    assert letter["id"] == jid and letter["attempts"] == 2
    assert letter["status"] is None and letter["response"] == "timeout after 0.3 s"
    assert endpoint.attempts[jid] == 2
