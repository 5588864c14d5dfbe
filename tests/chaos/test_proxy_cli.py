"""``python -m chaos.proxy`` as an operator runs it: proxies from ``--config``
at start, a clean exit on SIGTERM that closes them."""

from __future__ import annotations

import json
import socket

import requests

from tests.chaos.conftest import ProxyProcess


def test_config_file_and_clean_shutdown(tmp_path):
    with socket.socket() as upstream:
        upstream.bind(("127.0.0.1", 0))
        upstream.listen(4)
        address = "127.0.0.1:%d" % upstream.getsockname()[1]
        config = tmp_path / "proxies.json"
        config.write_text(json.dumps([
            {"name": "a", "listen": "127.0.0.1:0", "upstream": address},
            {"name": "b", "listen": "127.0.0.1:0", "upstream": address, "enabled": False}]))
        server = ProxyProcess(tmp_path / "proxy.log", "--config", str(config))
        try:
            proxies = requests.get(server.url + "/proxies", timeout=10).json()
            assert {n: p["enabled"] for n, p in proxies.items()} == {"a": True, "b": False}
            listen = proxies["a"]["listen"]
            port = int(listen.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
        finally:
            assert server.stop() == 0
        with socket.socket() as s:                    # the proxy went with the server
            assert s.connect_ex(("127.0.0.1", port)) != 0


def test_a_bad_config_file_is_reported_and_the_api_still_starts(tmp_path):
    config = tmp_path / "proxies.json"
    config.write_text('[{"listen": "127.0.0.1:0"}]')
    server = ProxyProcess(tmp_path / "proxy.log", "--config", str(config))
    try:
        assert requests.get(server.url + "/proxies", timeout=10).json() == {}
    finally:
        assert server.stop() == 0
    assert "missing required field: name at proxy 1" in server.log_tail()
