"""The fault proxy driven by toxiproxy-python 0.1.1 itself (and the thin
``chaos.toxiproxy_client`` subclasses for the calls it lacks)."""

from __future__ import annotations

import socket

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.proxy import VERSION
from chaos.toxiproxy_client import ChaosProxy, ChaosToxiproxy, ToxiproxyError


@pytest.fixture
def server(api) -> Toxiproxy:
    """toxiproxy-python's own Toxiproxy, pointed at the module's proxy server."""
    toxiproxy = Toxiproxy()
    toxiproxy.update_api_consumer(api.host, api.port)
    return toxiproxy


@pytest.fixture
def upstream():
    """A listening socket (accepts queue in the kernel), enough for a proxy to dial."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield "127.0.0.1:%d" % s.getsockname()[1]


def port_of(listen: str) -> int:
    return int(listen.rsplit(":", 1)[1])


def can_connect(listen: str) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port_of(listen))) == 0


def test_running_and_version(server):
    assert server.running() is True
    assert server.version() == f'{{"version": "{VERSION}"}}\n'.encode()


def test_create_list_get_and_destroy(server, upstream):
    proxy = server.create(upstream=upstream, name="db")
    assert (proxy.name, proxy.upstream, proxy.enabled) == ("db", upstream, True)
    assert proxy.listen.startswith("127.0.0.1:") and port_of(proxy.listen) > 0
    assert can_connect(proxy.listen)
    assert set(server.proxies()) == {"db"}
    got = server.get_proxy("db")
    assert (got.name, got.listen, got.upstream, got.enabled) == (
        "db", proxy.listen, upstream, True)
    assert server.get_proxy("missing") is None

    with pytest.raises(ProxyExists):                 # the client's own check
        server.create(upstream=upstream, name="db")
    with pytest.raises(ProxyExists):                 # the server's 409
        APIConsumer.post("/proxies", json={"name": "db", "upstream": upstream})
    with pytest.raises(InvalidToxic):                # toxiproxy-python's name for any 400
        APIConsumer.post("/proxies", json={"name": "x"})

    assert server.destroy(proxy) is True
    assert not can_connect(proxy.listen)
    with pytest.raises(NotFound):
        proxy.destroy()
    assert server.proxies() == {}


def test_disable_enable_and_down(server, upstream):
    proxy = server.create(upstream=upstream, name="p")
    proxy.disable()
    assert proxy.enabled is False and server.get_proxy("p").enabled is False
    assert not can_connect(proxy.listen)
    proxy.enable()
    assert can_connect(proxy.listen)
    with proxy.down():
        assert not can_connect(proxy.listen)
    assert can_connect(proxy.listen) and server.get_proxy("p").enabled is True


def test_create_disabled(server, upstream):
    proxy = server.create(upstream=upstream, name="p", listen="127.0.0.1:0", enabled=False)
    assert proxy.enabled is False


def test_populate_and_destroy_all(server, upstream):
    made = server.populate([{"name": "a", "upstream": upstream, "listen": "127.0.0.1:0"},
                            {"name": "b", "upstream": upstream, "listen": "127.0.0.1:0"}])
    assert sorted(p.name for p in made) == ["a", "b"]
    assert set(server.proxies()) == {"a", "b"}
    server.destroy_all()
    assert server.proxies() == {}


def test_toxics(server, upstream):
    proxy = server.create(upstream=upstream, name="p")
    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 5})
    proxy.add_toxic(name="cut", type="timeout", stream="upstream", toxicity=0.5,
                    attributes={"timeout": 1000})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "cut"}
    latency = proxy.get_toxic("latency_downstream")
    assert (latency.type, latency.stream, latency.toxicity, latency.attributes) == (
        "latency", "downstream", 1, {"latency": 100, "jitter": 5})
    cut = toxics["cut"]
    assert (cut.type, cut.stream, cut.toxicity, cut.attributes) == (
        "timeout", "upstream", 0.5, {"timeout": 1000})

    with pytest.raises(ProxyExists):                 # 409: toxic already exists
        proxy.add_toxic(type="latency")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="gremlins")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", name="x", stream="sideways")

    assert proxy.destroy_toxic("cut") is True
    with pytest.raises(NotFound):
        proxy.destroy_toxic("cut")
    assert set(proxy.toxics()) == {"latency_downstream"}


def test_reset(server, upstream):
    proxy = server.create(upstream=upstream, name="p")
    proxy.add_toxic(type="latency")
    proxy.disable()
    assert server.reset() is True
    again = server.get_proxy("p")
    assert again.enabled is True and again.toxics() == {}
    assert can_connect(proxy.listen)


def test_chaos_subclass_adds_the_missing_calls(api, upstream):
    server = ChaosToxiproxy(api.host, api.port)
    proxy = server.create(upstream=upstream, name="p")
    assert isinstance(proxy, ChaosProxy) and proxy.toxics_at_read == []
    toxic = proxy.add_toxic(type="latency", attributes={"latency": 10})
    assert (toxic.name, toxic.attributes) == ("latency_downstream", {"latency": 10, "jitter": 0})

    updated = proxy.update_toxic("latency_downstream", attributes={"jitter": 3}, toxicity=0.25)
    assert (updated.attributes, updated.toxicity) == ({"latency": 10, "jitter": 3}, 0.25)
    assert proxy.toxic("latency_downstream").attributes == {"latency": 10, "jitter": 3}
    with pytest.raises(NotFound):
        proxy.toxic("nope")
    with pytest.raises(NotFound):
        proxy.update_toxic("nope", attributes={})

    assert proxy.update(enabled=False).enabled is False
    assert not can_connect(proxy.listen)
    assert proxy.update(enabled=True).enabled is True

    with pytest.raises(ToxiproxyError):             # 500: the port is taken
        server.create(upstream=upstream, name="q", listen=proxy.listen)

    made = server.populate_server([{"name": "p", "listen": proxy.listen, "upstream": upstream},
                                   {"name": "r", "listen": "127.0.0.1:0", "upstream": upstream}])
    assert [p.name for p in made] == ["p", "r"]
    assert [t.name for t in made[0].toxics_at_read] == ["latency_downstream"]   # kept
    with pytest.raises(InvalidToxic):
        server.populate_server([{"name": "s"}])
    assert set(server.proxies()) == {"p", "r"}
