"""The REST API over real sockets (aiohttp's client) on a real node, checked
against what a RESP client (redis-py) sees on the same node."""

from __future__ import annotations

import asyncio
import base64
import socket

import aiohttp
import pytest

from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, wait_until
from tests.http.conftest import start_http_node
from tests.integration.conftest import JOB_ID_RE, show

BINARY = bytes(range(256)) + b"\xff\xfe\x00tail"


def info(node, field: str) -> str:
    """One INFO field, as text (read on a raw connection)."""
    with node.raw() as r:
        text = r.call("INFO", "all").decode()
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(field)


async def post_job(http, queue="q", **doc):
    async with http.post(f"/queues/{queue}/jobs", json=doc) as r:
        return r.status, await r.json()


# --------------------------------------------------------------------- adding
async def test_add_one_job_is_addjob(hnode, http):
    status, doc = await post_job(http, body="hello", retry=60, ttl=3600, delay=0, replicate=1,
                                 maxlen=10, timeout_ms=0)
    assert status == 201 and JOB_ID_RE.match(doc["id"].encode())
    c = hnode.client()
    fields = show(c, doc["id"])
    assert (fields["queue"], fields["retry"], fields["body"]) == (b"q", 60, b"hello")
    assert c.execute_command("QLEN", "q") == 1
    async with http.get(f"/jobs/{doc['id']}") as r:
        job = await r.json()
    assert r.status == 200
    assert job["id"] == doc["id"] and job["state"] == "queued" and job["retry"] == 60
    assert job["body"] == "hello" and job["nodes_delivered"] == [fields["nodes-delivered"][0].decode()]
    assert set(job) >= {"ttl", "ctime", "delay", "nacks", "additional_deliveries",
                        "nodes_confirmed", "next_requeue_within", "next_awake_within", "repl"}


async def test_options_from_query_string_and_async(hnode, http):
    async with http.post("/queues/q/jobs?retry=7&ttl=100&async=true", json={"body": "x"}) as r:
        jid = (await r.json())["id"]
    assert r.status == 201
    assert show(hnode.client(), jid)["retry"] == 7
    async with http.post("/queues/q/jobs?retry=7", json={"body": "y", "retry": 9}) as r:
        jid = (await r.json())["id"]
    assert show(hnode.client(), jid)["retry"] == 9      # the item's field wins


async def test_held_and_idempotent_adds_ext(hnode, http):
    """(ext) ``hold`` and ``idempotency_key`` are ADDJOB's HOLD and IDEMPOTENCY:
    a held job is not queued until ENQUEUE; a retried add with the same key gets
    the first add's id, whether the first came over HTTP or RESP."""
    c = hnode.client()
    status, doc = await post_job(http, body="staged", hold=True)
    assert status == 201 and show(c, doc["id"])["state"] == b"held"
    assert c.execute_command("QLEN", "q") == 0
    async with http.post("/queues/q/jobs?hold=true", data=b"raw",
                         headers={"Content-Type": "application/octet-stream"}) as r:
        held = (await r.json())["id"]
    assert show(c, held)["state"] == b"held"
    c.execute_command("ENQUEUE", doc["id"], held)
    assert c.execute_command("QLEN", "q") == 2

    status, first = await post_job(http, body="order 7", idempotency_key="order-7")
    assert status == 201
    status, again = await post_job(http, body="order 7", idempotency_key="order-7")
    assert (status, again["id"]) == (201, first["id"])
    assert c.execute_command("ADDJOB", "q", "order 7", 0, "IDEMPOTENCY",
                             "order-7").decode() == first["id"]
    async with http.post("/queues/q/jobs", json=[{"body": "a", "idempotency_key": "k-a"},
                                                 {"body": "a", "idempotency_key": "k-a"},
                                                 {"body": "b", "idempotency_key": "k-b"}]) as r:
        ids = (await r.json())["ids"]
    assert r.status == 201 and ids[0] == ids[1] != ids[2]
    assert c.execute_command("QLEN", "q") == 2 + 1 + 2

    for bad, message in (({"hold": "yes"}, "job: hold must be true or false"),
                         ({"idempotency_key": 7}, "job: idempotency_key must be a string"),
                         ({"idempotency_key": ""}, "IDEMPOTENCY key must be 1 to 256 bytes")):
        status, doc = await post_job(http, body="x", **bad)
        assert status == 400 and message in doc["message"], doc
    async with http.post("/queues/q/jobs?idempotency_key=k", json=[{"body": "x"}]) as r:
        assert r.status == 400 and "give each job of a batch its own" in (await r.json())["message"]
    assert c.execute_command("QLEN", "q") == 5


async def test_batch_of_10000(hnode, http):
    jobs = [{"body": f"job {i}"} for i in range(10_000)]
    async with http.post("/queues/big/jobs?retry=30", json=jobs) as r:
        doc = await r.json()
    assert r.status == 201
    ids = doc["ids"]
    assert len(ids) == 10_000 and len(set(ids)) == 10_000 and "errors" not in doc
    c = hnode.client()
    assert c.execute_command("QLEN", "big") == 10_000
    first = c.execute_command("GETJOB", "COUNT", 3, "FROM", "big")
    assert [j[2] for j in first] == [b"job 0", b"job 1", b"job 2"]
    assert [j[1].decode() for j in first] == ids[:3]


async def test_batch_reports_each_failed_item(hnode, http):
    items = ["plain string", {"body": "ok"}, {"body": "bad", "retry": -1},
             {"body": "x", "replicate": 5}, {"body_base64": base64.b64encode(b"\xff").decode()}]
    async with http.post("/queues/q/jobs", json=items) as r:
        doc = await r.json()
    assert r.status == 207
    assert [i is not None for i in doc["ids"]] == [True, True, False, False, True]
    assert doc["errors"] == [
        {"index": 2, "error": "ERR", "message": "ERR RETRY time must be a non negative number"},
        {"index": 3, "error": "NOREPL",
         "message": "NOREPL Not enough reachable nodes for the requested replication level"},
    ]
    assert hnode.client().execute_command("QLEN", "q") == 3


async def test_batch_with_a_malformed_item_adds_nothing(hnode, http):
    async with http.post("/queues/q/jobs", json=[{"body": "a"}, {"body": 5}]) as r:
        doc = await r.json()
    assert r.status == 400 and doc["error"] == "BADREQUEST" and "job 1" in doc["message"]
    assert hnode.client().execute_command("QLEN", "q") == 0


# ---------------------------------------------------------------- binary bodies
async def test_binary_bodies_round_trip_both_ways(hnode, http):
    c = hnode.client()
    # RESP in, HTTP out: body_base64 (not UTF-8), or the bytes themselves.
    jid = c.execute_command("ADDJOB", "bin", BINARY, 0).decode()
    async with http.get(f"/jobs/{jid}") as r:
        doc = await r.json()
    assert "body" not in doc and base64.b64decode(doc["body_base64"]) == BINARY
    async with http.get(f"/jobs/{jid}", headers={"Accept": "application/octet-stream"}) as r:
        assert r.status == 200 and await r.read() == BINARY
        assert r.headers["X-Job-Id"] == jid
    async with http.get("/queues/bin/jobs?count=1") as r:
        got = (await r.json())["jobs"]
    assert got[0]["id"] == jid and base64.b64decode(got[0]["body_base64"]) == BINARY
    # HTTP in (octet-stream, and body_base64), RESP out: the same bytes.
    async with http.post("/queues/bin2/jobs?retry=5", data=BINARY,
                         headers={"Content-Type": "application/octet-stream"}) as r:
        assert r.status == 201
    status, _ = await post_job(http, "bin2", body_base64=base64.b64encode(BINARY).decode())
    assert status == 201
    got = c.execute_command("GETJOB", "COUNT", 2, "FROM", "bin2")
    assert [j[2] for j in got] == [BINARY, BINARY]
    # encoding=base64 forces base64 for text too; Accept octet-stream on GETJOB.
    c.execute_command("ADDJOB", "t", "text", 0)
    async with http.get("/queues/t/peek?encoding=base64") as r:
        assert (await r.json())["jobs"][0]["body_base64"] == base64.b64encode(b"text").decode()
    async with http.get("/queues/t/jobs", headers={"Accept": "application/octet-stream"}) as r:
        assert r.status == 200 and await r.read() == b"text"
        assert r.headers["X-Job-Queue"] == "t" and r.headers["X-Job-Nacks"] == "0"
    async with http.get("/queues/t/jobs?nohang=1",
                        headers={"Accept": "application/octet-stream"}) as r:
        assert r.status == 204


# -------------------------------------------------------------------- taking
async def test_getjob_nohang_count_and_counters(hnode, http):
    async with http.get("/queues/empty/jobs?nohang=true") as r:
        assert r.status == 200 and await r.json() == {"jobs": []}
    ids = []
    for i in range(3):
        _, doc = await post_job(http, body=f"b{i}")
        ids.append(doc["id"])
    async with http.get("/queues/q/jobs?count=2") as r:
        jobs = (await r.json())["jobs"]
    assert [j["id"] for j in jobs] == ids[:2]
    assert jobs[0] == {"queue": "q", "id": ids[0], "body": "b0", "nacks": 0,
                       "additional_deliveries": 0}
    async with http.post(f"/jobs/{ids[0]}/nack") as r:
        assert await r.json() == {"count": 1}
    async with http.get("/queues/q/jobs?count=5&timeout_ms=100") as r:
        jobs = (await r.json())["jobs"]
    assert {j["id"]: j["nacks"] for j in jobs} == {ids[2]: 0, ids[0]: 1}
    async with http.get("/queues/q/jobs?timeout_ms=50") as r:    # times out: empty
        assert await r.json() == {"jobs": []}


async def test_long_poll_woken_by_resp_addjob(hnode, http):
    poll = asyncio.ensure_future(http.get(f"/queues/lp/jobs?timeout_ms={NODE_WAIT_MS}"))
    await asyncio.to_thread(wait_until, lambda: info(hnode, "blocked_clients") == "1")
    jid = hnode.client().execute_command("ADDJOB", "lp", "wake up", 0).decode()
    async with await poll as r:
        doc = await r.json()
    assert doc["jobs"][0]["id"] == jid and doc["jobs"][0]["body"] == "wake up"
    assert info(hnode, "blocked_clients") == "0"


async def test_long_poll_client_gone_unblocks_without_losing_a_job(hnode):
    for _ in range(3):
        async with aiohttp.ClientSession(hnode.http_url) as s:
            poll = asyncio.ensure_future(s.get("/queues/gone/jobs?timeout_ms=0"))
            await asyncio.to_thread(wait_until, lambda: info(hnode, "blocked_clients") == "1")
            poll.cancel()       # the HTTP client goes away
    await asyncio.to_thread(wait_until, lambda: info(hnode, "blocked_clients") == "0")
    c = hnode.client()
    jid = c.execute_command("ADDJOB", "gone", "still here", 0)
    assert c.execute_command("QLEN", "gone") == 1
    assert c.execute_command("GETJOB", "NOHANG", "FROM", "gone")[0][1] == jid


async def test_long_poll_timeout_and_leaving(hnode, http):
    c = hnode.client()
    async with http.get("/queues/q/jobs?timeout_ms=abc") as r:
        assert r.status == 400
        assert await r.json() == {"error": "ERR",
                                  "message": "ERR timeout is not an integer or out of range"}
    async with http.get("/queues/q/jobs?count=0") as r:
        assert (await r.json())["message"] == "ERR COUNT must be a number greater than zero"
    async with http.get("/queues/q/jobs?nohang=maybe") as r:
        assert r.status == 400 and (await r.json())["error"] == "BADREQUEST"
    c.execute_command("CLUSTER", "LEAVING", "yes")
    try:
        async with http.get("/queues/q/jobs?timeout_ms=1000") as r:
            assert r.status == 503 and (await r.json())["error"] == "LEAVING"
    finally:
        c.execute_command("CLUSTER", "LEAVING", "no")


# ------------------------------------------------------------------ job actions
async def test_ack_fastack_nack_working_delete(hnode, http):
    c = hnode.client()
    ids = [c.execute_command("ADDJOB", "q", f"j{i}", 0, "RETRY", 60).decode() for i in range(4)]
    c.execute_command("GETJOB", "COUNT", 4, "FROM", "q")
    async with http.post(f"/jobs/{ids[0]}/working") as r:
        assert r.status == 200 and await r.json() == {"retry": 60}
    async with http.post(f"/jobs/{ids[0]}/ack") as r:
        assert await r.json() == {"count": 1}
    assert show(c, ids[0]) is None         # one node: acked and collected at once
    async with http.post(f"/jobs/{ids[1]}/fastack") as r:
        assert await r.json() == {"count": 1}
    async with http.post(f"/jobs/{ids[2]}/nack") as r:
        assert await r.json() == {"count": 1}
    assert show(c, ids[2])["nacks"] == 1 and c.execute_command("QLEN", "q") == 1
    async with http.delete(f"/jobs/{ids[3]}") as r:
        assert await r.json() == {"deleted": 1}
    assert show(c, ids[3]) is None
    for method, path in (("GET", ""), ("DELETE", ""), ("POST", "/working")):
        async with http.request(method, f"/jobs/{ids[3]}{path}") as r:
            doc = await r.json()
            assert (r.status, doc["error"]) == (404, "NOJOB"), (method, path)
    for action in ("ack", "fastack", "nack"):       # as the commands: 0 for an unknown id
        async with http.post(f"/jobs/{ids[3]}/{action}") as r:
            assert await r.json() == {"count": 0}
    async with http.get("/jobs/not-a-job-id") as r:
        assert (r.status, await r.json()) == (400, {"error": "BADID",
                                                    "message": "BADID Invalid Job ID format."})
    async with http.post("/jobs/not-a-job-id/ack") as r:
        assert r.status == 400 and (await r.json())["error"] == "BADID"


# ---------------------------------------------------------------------- queues
async def test_queues_qstat_pause_and_peek(hnode, http):
    c = hnode.client()
    for q, n in (("a", 2), ("b", 1)):
        for i in range(n):
            c.execute_command("ADDJOB", q, f"{q}{i}", 0)
    async with http.get("/queues") as r:
        doc = await r.json()
    stats = {q["name"]: q for q in doc["queues"]}
    assert doc["cursor"] == "0" and set(stats) == {"a", "b"}
    assert stats["a"]["len"] == 2 and stats["a"]["jobs_in"] == 2 and stats["a"]["pause"] == "none"
    async with http.get("/queues?minlen=2&stats=false") as r:
        assert (await r.json())["queues"] == [{"name": "a"}]
    async with http.get("/queues?cursor=0&count=1") as r:
        assert r.status == 200 and "cursor" in await r.json()
    async with http.get("/queues/a") as r:
        qs = await r.json()
    resp = c.execute_command("QSTAT", "a")
    assert qs["len"] == resp[3] == 2 and qs["jobs_out"] == 0
    async with http.get("/queues/nope") as r:
        assert (r.status, (await r.json())["error"]) == (404, "NOQUEUE")
    async with http.get("/queues/a/peek?count=5") as r:
        assert [j["body"] for j in (await r.json())["jobs"]] == ["a0", "a1"]
    async with http.post("/queues/a/pause", json={"state": "in"}) as r:
        assert await r.json() == {"pause": "in"}
    assert c.execute_command("PAUSE", "a", "state") == b"in"
    status, doc = await post_job(http, "a", body="refused")
    assert (status, doc) == (409, {"error": "PAUSED",
                                   "message": "PAUSED Queue paused in input, try later"})
    async with http.post("/queues/a/pause?state=none") as r:
        assert await r.json() == {"pause": "none"}
    async with http.post("/queues/a/pause", json={"state": "sideways"}) as r:
        assert r.status == 400
    status, doc = await post_job(http, "a", body="x", maxlen=2)
    assert (status, doc["error"]) == (409, "MAXLEN")


async def test_cluster_of_one(hnode, http):
    async with http.get("/cluster") as r:
        doc = await r.json()
    myid = hnode.client().execute_command("CLUSTER", "MYID").decode()
    assert doc["myself"] == myid
    assert doc["nodes"] == [{"id": myid, "ip": "127.0.0.1", "port": hnode.port,
                             "flags": ["myself"], "myself": True, "priority": 1,
                             "ping_sent": 0, "pong_received": 0, "link": "connected"}]
    assert doc["info"]["cluster_known_nodes"] == 1


# ---------------------------------------------------------------------- errors
async def test_errors_have_codes_and_statuses(hnode, http):
    c = hnode.client()
    status, doc = await post_job(http, body="x", replicate=3)
    assert (status, doc["error"]) == (503, "NOREPL")
    status, doc = await post_job(http, body="x", ttl=0)
    assert (status, doc) == (400, {"error": "ERR", "message": "ERR TTL must be a number > 0"})
    for bad, why in ((b"{nope", "invalid JSON"), (b"[" * 100_000, "invalid JSON"),
                     (b'{"body": "x", "colour": 1}', "unknown field"),
                     (b'{"body": "x", "retry": "5"}', "must be an integer"),
                     (b'{"body": "x", "async": 1}', "async"),
                     (b'{"body_base64": "***"}', "base64"), (b"", "required"), (b"42", "object")):
        async with http.post("/queues/q/jobs", data=bad,
                             headers={"Content-Type": "application/json"}) as r:
            doc = await r.json()
            assert r.status == 400 and doc["error"] == "BADREQUEST" and why in doc["message"], bad
    async with http.post("/queues/q/jobs", data=b"x", headers={"Content-Type": "image/png"}) as r:
        assert (r.status, (await r.json())["error"]) == (415, "UNSUPPORTED")
    async with http.get("/no/such/route") as r:
        assert (r.status, (await r.json())["error"]) == (404, "NOTFOUND")
    async with http.put("/queues/q/jobs") as r:
        assert (r.status, (await r.json())["error"]) == (405, "METHOD")
    c.execute_command("CONFIG", "SET", "maxmemory", "1mb")
    status, doc = await post_job(http, body="x")
    assert (status, doc["error"]) == (507, "OOM")
    assert c.execute_command("QLEN", "q") == 0


async def test_request_body_limit_is_proto_max_bulk_len(hnode, http):
    c = hnode.client()
    c.execute_command("CONFIG", "SET", "proto-max-bulk-len", "1mb")
    try:
        big = b"x" * (1024 * 1024 + 1)
        async with http.post("/queues/q/jobs", data=big,
                             headers={"Content-Type": "application/octet-stream"}) as r:
            assert (r.status, (await r.json())["error"]) == (413, "TOOLARGE")

        async def chunks():         # no Content-Length: counted while read
            for _ in range(3):
                yield b"y" * 400_000
        async with http.post("/queues/q/jobs", data=chunks(),
                             headers={"Content-Type": "application/octet-stream"}) as r:
            assert r.status == 413
        async with http.post("/queues/q/jobs", data=b"z" * 1000,
                             headers={"Content-Type": "application/octet-stream"}) as r:
            assert r.status == 201
    finally:
        c.execute_command("CONFIG", "SET", "proto-max-bulk-len", "512mb")
    assert c.execute_command("QLEN", "q") == 1


def test_malformed_http_harms_nothing(hnode):
    garbage = [b"\x00\xff\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n", b"POST /queues/q/jobs HTTP/1.1\r\n"
               b"Content-Length: 99999999999999999999\r\n\r\n", b"GET /" + b"a" * 70000 +
               b" HTTP/1.1\r\n\r\n", b"POST /queues/q/jobs HTTP/1.1\r\nTransfer-Encoding: "
               b"chunked\r\n\r\nzz\r\n"]
    for data in garbage:
        with socket.create_connection(("127.0.0.1", hnode.http_port), timeout=WAIT_TIMEOUT) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        assert reply == b"" or reply.startswith(b"HTTP/1.") and b" 5" not in reply[:13], reply[:80]
    c = hnode.client()
    assert c.ping() and c.execute_command("QLEN", "q") == 0


# ------------------------------------------------------------------------ auth
async def test_requirepass_needs_a_bearer_password(node_factory):
    n = start_http_node(node_factory, requirepass="s3cret")
    async with aiohttp.ClientSession(n.http_url) as http:
        for headers in ({}, {"Authorization": "Basic czNjcmV0"}):
            async with http.post("/queues/q/jobs", json={"body": "x"}, headers=headers) as r:
                assert r.status == 401 and (await r.json())["error"] == "NOAUTH"
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
        async with http.get("/queues", headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
            assert await r.json() == {"error": "WRONGPASS", "message": "ERR invalid password"}
        async with http.get("/metrics") as r:
            assert r.status == 401
        good = {"Authorization": "Bearer s3cret"}
        async with http.post("/queues/q/jobs", json=["a", "b"], headers=good) as r:
            assert r.status == 201
        async with http.get("/queues/q/jobs?count=2", headers=good) as r:
            assert len((await r.json())["jobs"]) == 2
        async with http.get("/metrics", headers=good) as r:
            assert r.status == 200 and "disquette_registered_jobs 2.0" in await r.text()
        async with http.get("/openapi.json") as r:      # the document and the page are public
            assert r.status == 200


async def test_http_with_aof_always_survives_kill(node_factory):
    n = start_http_node(node_factory, appendonly="yes", appendfsync="always")
    async with aiohttp.ClientSession(n.http_url) as http:
        async with http.post("/queues/q/jobs", json=[{"body": f"{i}"} for i in range(50)]) as r:
            ids = (await r.json())["ids"]
    n.restart(kill=True)
    c = n.client()
    wait_until(lambda: c.execute_command("PING") in (True, b"PONG"), ignore=Exception)
    assert all(show(c, i) is not None for i in ids)


@pytest.mark.parametrize("path", ["/", "/static/dashboard.js", "/static/vendor/uPlot.iife.min.js",
                                  "/openapi.json"])
async def test_static_routes(hnode, http, path):
    async with http.get(path) as r:
        assert r.status == 200 and len(await r.read()) > 100
