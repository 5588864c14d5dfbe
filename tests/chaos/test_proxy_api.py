"""The fault proxy's HTTP API over raw HTTP (aiohttp client): every route, its
JSON shape, status code and error body, as Toxiproxy's server answers them."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest

from chaos.proxy import VERSION

ERROR_TYPE = "text/plain; charset=utf-8"


@pytest.fixture
async def http(api):
    async with aiohttp.ClientSession(api.url) as session:
        yield session


async def call(http, method: str, path: str, body=None, raw: bytes | None = None,
               **kwargs) -> tuple[int, str, str]:
    data = raw if raw is not None else (None if body is None else json.dumps(body))
    async with http.request(method, path, data=data, **kwargs) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def error_body(message: str, status: int) -> str:
    return json.dumps({"error": message, "status": status}, separators=(",", ":")) + "\n"


async def expect_error(http, method, path, message, status, body=None, raw=None):
    got = await call(http, method, path, body, raw)
    assert got == (status, ERROR_TYPE, error_body(message, status))


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def create(http, name: str, upstream: str, **extra) -> dict:
    status, ctype, text = await call(http, "POST", "/proxies",
                                     {"name": name, "listen": "127.0.0.1:0",
                                      "upstream": upstream, **extra})
    assert (status, ctype) == (201, "application/json"), text
    return json.loads(text)


async def test_version(http):
    assert await call(http, "GET", "/version") == (
        200, "application/json;charset=utf-8", f'{{"version": "{VERSION}"}}\n')


async def test_create_show_list_and_delete_a_proxy(http, tcp_servers):
    echo = await tcp_servers("echo")
    status, ctype, text = await call(http, "POST", "/proxies",
                                     {"name": "db", "listen": "127.0.0.1:0",
                                      "upstream": echo.address})
    assert (status, ctype) == (201, "application/json")
    # Go's field order, compact; the listen address is the bound one.
    assert text.startswith('{"name":"db","listen":"127.0.0.1:')
    created = json.loads(text)
    assert created == {"name": "db", "listen": created["listen"], "upstream": echo.address,
                       "enabled": True, "toxics": []}
    assert port_of(created["listen"]) > 0

    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(created["listen"]))
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"

    assert await call(http, "GET", "/proxies/db") == (200, "application/json",
                                                      json.dumps(created, separators=(",", ":")))
    status, _, text = await call(http, "GET", "/proxies")
    assert status == 200 and json.loads(text) == {"db": created}

    assert await call(http, "DELETE", "/proxies/db") == (204, "", "")
    assert await reader.read() == b""                   # its connections are dropped
    assert await refused(port_of(created["listen"]))
    assert await call(http, "GET", "/proxies") == (200, "application/json", "{}")


async def test_proxies_are_listed_by_name(http, tcp_servers):
    echo = await tcp_servers("echo")
    for name in ("b", "c", "a"):
        await create(http, name, echo.address)
    _, _, text = await call(http, "GET", "/proxies")
    assert list(json.loads(text)) == ["a", "b", "c"]


async def test_create_errors(http, tcp_servers):
    echo = await tcp_servers("echo")
    await expect_error(http, "POST", "/proxies", "missing required field: name", 400,
                       {"upstream": echo.address})
    await expect_error(http, "POST", "/proxies", "missing required field: upstream", 400,
                       {"name": "x"})
    status, ctype, text = await call(http, "POST", "/proxies", raw=b"{nope")
    assert (status, ctype) == (400, ERROR_TYPE)
    assert json.loads(text)["error"].startswith("bad request body: ")
    status, _, text = await call(http, "POST", "/proxies", raw=b"")
    assert (status, json.loads(text)["error"]) == (400, "bad request body: EOF")
    status, _, text = await call(http, "POST", "/proxies",
                                 {"name": "x", "upstream": echo.address, "enabled": "yes"})
    assert status == 400 and "Proxy.enabled of type bool" in json.loads(text)["error"]

    first = await create(http, "x", echo.address)
    await expect_error(http, "POST", "/proxies", "proxy already exists", 409,
                       {"name": "x", "upstream": echo.address})
    taken = first["listen"]
    await expect_error(http, "POST", "/proxies",
                       f"listen tcp {taken}: bind: address already in use", 500,
                       {"name": "y", "listen": taken, "upstream": echo.address})
    await expect_error(http, "POST", "/proxies",
                       "listen tcp: address nowhere: missing port in address", 500,
                       {"name": "y", "listen": "nowhere", "upstream": echo.address})
    assert list(json.loads((await call(http, "GET", "/proxies"))[2])) == ["x"]


async def test_keys_match_fields_in_any_case_and_unknown_keys_are_ignored(http, tcp_servers):
    echo = await tcp_servers("echo")
    created = await create(http, "x", echo.address, Enabled=False, colour="blue")
    assert created["enabled"] is False


async def test_unknown_proxy_is_404_on_every_route(http):
    for method, path, body in [("GET", "/proxies/nope", None), ("POST", "/proxies/nope", {}),
                               ("PATCH", "/proxies/nope", {}), ("DELETE", "/proxies/nope", None),
                               ("GET", "/proxies/nope/toxics", None),
                               ("POST", "/proxies/nope/toxics", {"type": "latency"}),
                               ("GET", "/proxies/nope/toxics/t", None),
                               ("POST", "/proxies/nope/toxics/t", {}),
                               ("DELETE", "/proxies/nope/toxics/t", None)]:
        await expect_error(http, method, path, "proxy not found", 404, body)


async def test_disable_refuses_and_drops_enable_listens_again(http, tcp_servers):
    echo = await tcp_servers("echo")
    proxy = await create(http, "p", echo.address)
    port = port_of(proxy["listen"])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    status, _, text = await call(http, "POST", "/proxies/p", {"enabled": False})
    assert status == 200 and json.loads(text) == {**proxy, "enabled": False}
    assert await reader.read() == b""
    assert await refused(port)

    status, _, text = await call(http, "PATCH", "/proxies/p", {"enabled": True})
    assert status == 200 and json.loads(text)["enabled"] is True
    reader, writer = await asyncio.open_connection("127.0.0.1", port)   # same address
    writer.write(b"again")
    assert await reader.readexactly(5) == b"again"
    writer.close()


async def test_created_disabled_until_enabled(http, tcp_servers):
    echo = await tcp_servers("echo")
    proxy = await create(http, "p", echo.address, enabled=False)
    assert proxy["enabled"] is False and proxy["listen"] == "127.0.0.1:0"
    status, _, text = await call(http, "POST", "/proxies/p", {"enabled": True})
    port = port_of(json.loads(text)["listen"])
    assert status == 200 and port > 0 and not await refused(port)


async def test_update_moves_listen_and_upstream(http, tcp_servers):
    first, second = await tcp_servers("echo"), await tcp_servers("sink")
    proxy = await create(http, "p", first.address)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        new_port = s.getsockname()[1]
    status, _, text = await call(http, "PATCH", "/proxies/p",
                                 {"listen": f"127.0.0.1:{new_port}", "upstream": second.address})
    assert status == 200
    assert json.loads(text) == {**proxy, "listen": f"127.0.0.1:{new_port}",
                                "upstream": second.address}
    assert await refused(port_of(proxy["listen"]))
    _, writer = await asyncio.open_connection("127.0.0.1", new_port)
    writer.write(b"to the sink")
    assert await second.wait_received(11) == b"to the sink"
    writer.close()

    status, _, text = await call(http, "POST", "/proxies/p", raw=b"[1]")
    assert status == 400 and json.loads(text)["error"].startswith("bad request body: ")


async def test_populate(http, tcp_servers):
    echo, sink = await tcp_servers("echo"), await tcp_servers("sink")
    body = [{"name": "one", "listen": "127.0.0.1:0", "upstream": echo.address},
            {"name": "two", "listen": "127.0.0.1:0", "upstream": echo.address, "enabled": False}]
    status, ctype, text = await call(http, "POST", "/populate", body)
    assert (status, ctype) == (201, "application/json")
    proxies = json.loads(text)["proxies"]
    assert [(p["name"], p["enabled"]) for p in proxies] == [("one", True), ("two", False)]

    # Same listen and upstream: the proxy is kept as it is, toxics and all.
    one = proxies[0]
    await call(http, "POST", "/proxies/one/toxics", {"type": "latency"})
    status, _, text = await call(http, "POST", "/populate",
                                 [{"name": "one", "listen": one["listen"], "upstream": echo.address}])
    assert status == 201 and json.loads(text)["proxies"][0]["toxics"] != []
    # A different upstream replaces it.
    status, _, text = await call(http, "POST", "/populate",
                                 [{"name": "one", "listen": one["listen"], "upstream": sink.address}])
    assert status == 201
    assert json.loads(text)["proxies"][0] == {**one, "upstream": sink.address, "toxics": []}

    assert await call(http, "POST", "/populate", []) == (201, "application/json",
                                                         '{"proxies":null}')


async def test_populate_errors(http, tcp_servers):
    echo = await tcp_servers("echo")
    # Checked before anything is created.
    assert await call(http, "POST", "/populate",
                      [{"name": "a", "upstream": echo.address}, {"upstream": echo.address}]) == (
        400, "application/json",
        '{"error":"missing required field: name at proxy 2","status":400,"proxies":null}')
    assert await call(http, "POST", "/populate", [{"name": "a"}]) == (
        400, "application/json",
        '{"error":"missing required field: upstream at proxy 1","status":400,"proxies":null}')
    assert json.loads((await call(http, "GET", "/proxies"))[2]) == {}
    # A listen failure stops there: the ones before it stay.
    status, _, text = await call(http, "POST", "/populate",
                                 [{"name": "a", "listen": "127.0.0.1:0", "upstream": echo.address},
                                  {"name": "b", "listen": "local373", "upstream": echo.address},
                                  {"name": "c", "listen": "127.0.0.1:0", "upstream": echo.address}])
    reply = json.loads(text)
    assert status == 500 and reply["status"] == 500
    assert reply["error"] == "listen tcp: address local373: missing port in address"
    assert [p["name"] for p in reply["proxies"]] == ["a"]
    assert list(json.loads((await call(http, "GET", "/proxies"))[2])) == ["a"]
    status, ctype, text = await call(http, "POST", "/populate", {"name": "a"})
    assert (status, ctype) == (400, "application/json")
    assert json.loads(text)["error"].startswith("bad request body: json: cannot unmarshal object")


async def test_toxic_routes(http, tcp_servers):
    echo = await tcp_servers("echo")
    await create(http, "p", echo.address)
    status, ctype, text = await call(http, "POST", "/proxies/p/toxics",
                                     {"type": "latency", "attributes": {"latency": 100}})
    assert (status, ctype) == (200, "application/json")      # 200, as Toxiproxy
    assert text == ('{"attributes":{"latency":100,"jitter":0},"name":"latency_downstream",'
                    '"type":"latency","stream":"downstream","toxicity":1}')
    status, _, text = await call(http, "POST", "/proxies/p/toxics",
                                 {"name": "cut", "type": "timeout", "stream": "upstream",
                                  "toxicity": 0.5})
    cut = json.loads(text)
    assert status == 200 and cut == {"attributes": {"timeout": 0}, "name": "cut",
                                     "type": "timeout", "stream": "upstream", "toxicity": 0.5}

    # Upstream chain first, then downstream, each in the order added.
    status, _, text = await call(http, "GET", "/proxies/p/toxics")
    assert status == 200 and [t["name"] for t in json.loads(text)] == ["cut", "latency_downstream"]
    status, _, text = await call(http, "GET", "/proxies/p")
    assert [t["name"] for t in json.loads(text)["toxics"]] == ["cut", "latency_downstream"]
    assert await call(http, "GET", "/proxies/p/toxics/cut") == (
        200, "application/json", json.dumps(cut, separators=(",", ":")))

    # Updates change only what they name.
    status, _, text = await call(http, "POST", "/proxies/p/toxics/latency_downstream",
                                 {"attributes": {"jitter": 10}})
    assert status == 200 and json.loads(text)["attributes"] == {"latency": 100, "jitter": 10}
    status, _, text = await call(http, "PATCH", "/proxies/p/toxics/cut", {"toxicity": 1})
    assert status == 200 and json.loads(text) == {**cut, "toxicity": 1}

    assert await call(http, "DELETE", "/proxies/p/toxics/cut") == (204, "", "")
    await expect_error(http, "DELETE", "/proxies/p/toxics/cut", "toxic not found", 404)
    await expect_error(http, "GET", "/proxies/p/toxics/cut", "toxic not found", 404)
    await expect_error(http, "POST", "/proxies/p/toxics/cut", "toxic not found", 404, {})
    assert [t["name"] for t in json.loads((await call(http, "GET", "/proxies/p/toxics"))[2])] == [
        "latency_downstream"]


async def test_every_toxic_type_and_its_attributes(http, tcp_servers):
    echo = await tcp_servers("echo")
    await create(http, "p", echo.address)
    expected = {"latency": {"latency": 0, "jitter": 0}, "bandwidth": {"rate": 0},
                "slow_close": {"delay": 0}, "timeout": {"timeout": 0},
                "reset_peer": {"timeout": 0},
                "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
                "limit_data": {"bytes": 0}}
    for kind, attributes in expected.items():
        status, _, text = await call(http, "POST", "/proxies/p/toxics",
                                     {"type": kind, "stream": "upstream"})
        assert status == 200 and json.loads(text)["attributes"] == attributes


async def test_toxic_errors(http, tcp_servers):
    echo = await tcp_servers("echo")
    await create(http, "p", echo.address)
    await expect_error(http, "POST", "/proxies/p/toxics",
                       "stream was invalid, can be either upstream or downstream", 400,
                       {"type": "latency", "stream": "sideways"})
    await expect_error(http, "POST", "/proxies/p/toxics", "invalid toxic type", 400,
                       {"type": "gremlins"})
    await expect_error(http, "POST", "/proxies/p/toxics", "invalid toxic type", 400, {})
    await call(http, "POST", "/proxies/p/toxics", {"type": "latency"})
    await expect_error(http, "POST", "/proxies/p/toxics", "toxic already exists", 409,
                       {"type": "latency"})
    # The stream is matched in any case; the name keeps the spelling given.
    status, _, text = await call(http, "POST", "/proxies/p/toxics",
                                 {"type": "latency", "stream": "UpStream"})
    assert status == 200 and json.loads(text)["name"] == "latency_UpStream"
    for bad in ({"type": "latency", "name": "e", "attributes": {"latency": "slow"}},
                {"type": "latency", "name": "f", "attributes": {"latency": 1.5}},
                {"type": "latency", "name": "g", "toxicity": "high"}):
        status, _, text = await call(http, "POST", "/proxies/p/toxics", bad)
        assert status == 400 and json.loads(text)["error"].startswith("bad request body: json: ")
    status, _, text = await call(http, "POST", "/proxies/p/toxics/latency_downstream",
                                 {"attributes": {"jitter": True}})
    assert status == 400 and "jitter" in json.loads(text)["error"]
    status, _, text = await call(http, "POST", "/proxies/p/toxics", raw=b"not json")
    assert status == 400 and json.loads(text)["error"].startswith("bad request body: ")


async def test_reset_enables_every_proxy_and_removes_every_toxic(http, tcp_servers):
    echo = await tcp_servers("echo")
    a = await create(http, "a", echo.address)
    await create(http, "b", echo.address)
    await call(http, "POST", "/proxies/a/toxics", {"type": "timeout"})
    await call(http, "POST", "/proxies/b/toxics", {"type": "latency", "stream": "upstream"})
    await call(http, "POST", "/proxies/a", {"enabled": False})

    assert await call(http, "POST", "/reset") == (204, "", "")
    proxies = json.loads((await call(http, "GET", "/proxies"))[2])
    assert {(p["name"], p["enabled"], len(p["toxics"])) for p in proxies.values()} == {
        ("a", True, 0), ("b", True, 0)}
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(a["listen"]))
    writer.write(b"back")
    assert await reader.readexactly(4) == b"back"
    writer.close()


async def test_unknown_routes_methods_and_browsers(http):
    assert await call(http, "GET", "/nothing") == (404, ERROR_TYPE, "404 page not found\n")
    assert await call(http, "GET", "/proxies/") == (404, ERROR_TYPE, "404 page not found\n")
    status, _, text = await call(http, "PUT", "/proxies")
    assert (status, text) == (405, "")
    assert await call(http, "GET", "/proxies",
                      headers={"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}) == (
        403, ERROR_TYPE, "User agent not allowed\n")
