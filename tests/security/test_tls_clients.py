"""TLS for clients (Redis' tls-* directives): redis-py with ssl=True, redis-cli
--tls, client certificates, protocols and ciphers, run-time changes, and bad
handshakes that close only their own connection."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
import redis

from tests.harness import NODE_WAIT_MS, WAIT_TIMEOUT, RawConn, free_port, wait_until
from tests.security.security_kit import client_context, tls_call

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"


def test_redis_py_and_redis_cli_talk_to_a_tls_only_node(tls_node):
    n = tls_node()
    for proto in (2, 3):
        c = n.client(protocol=proto)
        jid = c.execute_command("ADDJOB", f"q{proto}", "over tls", 0)
        job = c.execute_command("GETJOB", "NOHANG", "FROM", f"q{proto}")
        assert job[0][1] == jid and job[0][2] == b"over tls"
    assert n.cli("ADDJOB", "cli", "hello", "0").startswith("D-")
    assert n.cli("QLEN", "cli") == "1\n"
    assert n.client().config_get("port") == {"port": "0"}    # no plaintext at all
    assert n.client().config_get("tls-port") == {"tls-port": str(n.port)}
    # Plaintext on the TLS port: that connection is closed, nothing else moves.
    with RawConn(n.host, n.port) as r:
        r.send(b"*1\r\n$4\r\nPING\r\n")
        assert r.is_closed()
    assert n.client().ping()


def test_plaintext_and_tls_side_by_side(node_factory, pki):
    tls_port = free_port()
    n = node_factory(*pki.node_args(), tls_port=tls_port)
    assert n.client().ping()                                  # the plaintext port
    ctx = client_context(pki, pki.client)
    assert tls_call(tls_port, ctx, "PING") == PONG
    jid = n.client().execute_command("ADDJOB", "q", "x", 0)
    assert jid in tls_call(tls_port, ctx, "QPEEK", "q", 1)


def test_client_certificates_follow_tls_auth_clients(tls_node, pki):
    n = tls_node()
    with_cert = client_context(pki, pki.client)
    no_cert = client_context(pki, None)
    wrong_ca_cert = client_context(pki, pki.other_client)
    held = n.client()                       # a client that stays connected throughout
    assert held.ping()

    # yes (the default, as Redis): a certificate from the CA is required.
    assert tls_call(n.port, with_cert, "PING") == PONG
    for ctx in (no_cert, wrong_ca_cert):
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            tls_call(n.port, ctx, "PING")
    assert held.ping()

    # optional: none is fine, a bad one is still refused.
    assert held.config_set("tls-auth-clients", "optional")
    assert tls_call(n.port, no_cert, "PING") == PONG
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_call(n.port, wrong_ca_cert, "PING")

    # no: no certificate is asked for (redis-py without one works).
    assert held.config_set("tls-auth-clients", "no")
    assert tls_call(n.port, no_cert, "PING") == PONG
    plain_redis_py = redis.Redis(port=n.port, ssl=True, ssl_ca_certs=str(pki.ca.cert_file),
                                 socket_timeout=WAIT_TIMEOUT)
    assert plain_redis_py.ping()
    plain_redis_py.close()
    assert held.ping()


def test_clients_check_the_servers_certificate(tls_node, pki):
    n = tls_node()
    trusting_other_ca = client_context(pki, pki.client, ca=pki.other_ca)
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_call(n.port, trusting_other_ca, "PING")
    # The node's certificate names 127.0.0.1 and localhost.
    assert tls_call(n.port, client_context(pki, pki.client), "PING", host="127.0.0.1") == PONG


def test_tls_protocols_and_ciphers(tls_node, pki):
    n = tls_node(tls_protocols="TLSv1.3")
    tls12 = client_context(pki, pki.client, maximum_version=ssl.TLSVersion.TLSv1_2)
    tls13 = client_context(pki, pki.client, minimum_version=ssl.TLSVersion.TLSv1_3)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_call(n.port, tls12, "PING")
    assert tls_call(n.port, tls13, "PING") == PONG

    c = n.client()
    assert c.config_set("tls-protocols", "TLSv1.2")
    assert c.config_set("tls-ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert tls_call(n.port, tls12, "PING") == PONG
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_call(n.port, tls13, "PING")
    other_cipher = client_context(pki, pki.client, maximum_version=ssl.TLSVersion.TLSv1_2)
    other_cipher.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_call(n.port, other_cipher, "PING")
    with socket.create_connection((n.host, n.port)) as raw, \
            tls12.wrap_socket(raw, server_hostname=n.host) as s:
        assert s.version() == "TLSv1.2" and s.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"

    with pytest.raises(redis.ResponseError, match="tls-protocols"):
        c.config_set("tls-protocols", "SSLv3")
    with pytest.raises(redis.ResponseError, match="tls-ciphersuites is not supported"):
        c.config_set("tls-ciphersuites", "TLS_AES_128_GCM_SHA256")


def _peer_cn(port: int, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        subject = dict(x[0] for x in s.getpeercert()["subject"])
    return subject["commonName"]


def test_certificates_reload_with_config_set(tls_node, pki):
    n = tls_node()
    ctx = client_context(pki, pki.client)
    held = n.client()
    assert _peer_cn(n.port, ctx) == "node"
    # A new certificate and its key in one CONFIG SET (all or nothing, as Redis 7).
    assert held.execute_command("CONFIG", "SET", "tls-cert-file", str(pki.node2.cert),
                                "tls-key-file", str(pki.node2.key)) == b"OK"
    assert _peer_cn(n.port, ctx) == "node2"
    assert held.ping()                      # established connections are kept
    # The same file name again reloads it (rotation in place).
    assert held.config_set("tls-cert-file", str(pki.node2.cert))
    assert _peer_cn(n.port, ctx) == "node2"

    # A change that cannot work is refused and changes nothing.
    for args in (("tls-cert-file", "/nonexistent.crt"),
                 ("tls-key-file", str(pki.node.key)),             # not node2's key
                 ("tls-ca-cert-file", "/nonexistent-ca.crt")):
        with pytest.raises(redis.ResponseError,
                           match="Unable to update TLS configuration. Check server logs."):
            held.execute_command("CONFIG", "SET", *args)
        assert held.config_get(args[0]) != {args[0]: args[1]}
    assert _peer_cn(n.port, ctx) == "node2"
    assert "Failed to load certificate" in n.log()


def test_tls_port_opened_and_closed_at_run_time(node_factory, pki):
    n = node_factory()
    c = n.client()
    tls_port = free_port()
    args = ["tls-cert-file", str(pki.node.cert), "tls-key-file", str(pki.node.key),
            "tls-ca-cert-file", str(pki.ca.cert_file), "tls-port", str(tls_port)]
    assert c.execute_command("CONFIG", "SET", *args) == b"OK"
    ctx = client_context(pki, pki.client)
    assert tls_call(tls_port, ctx, "PING") == PONG
    # A port in use is refused, and the TLS port stays where it was.
    busy = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(redis.ResponseError, match="Unable to listen on this port"):
            c.config_set("tls-port", busy.getsockname()[1])
    finally:
        busy.close()
    assert c.config_get("tls-port") == {"tls-port": str(tls_port)}
    assert tls_call(tls_port, ctx, "PING") == PONG
    assert c.config_set("tls-port", 0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", tls_port), timeout=2)
    assert c.ping()


def test_an_encrypted_key_needs_tls_key_file_pass(node_factory, pki):
    issued = pki.ca.issue("locked", password="key pass")
    args = ["--tls-cert-file", issued.cert, "--tls-key-file", issued.key,
            "--tls-ca-cert-file", pki.ca.cert_file]
    tls_port = free_port()
    n = node_factory(*args, tls_port=tls_port, tls_key_file_pass="key pass")
    assert tls_call(tls_port, client_context(pki, pki.client), "PING") == PONG
    n.terminate()
    bad = node_factory(*args, tls_port=free_port(), tls_key_file_pass="wrong", start=False)
    with pytest.raises(Exception, match="exited with code 1"):
        bad.start()
    assert "Failed to load certificate" in bad.log()


@pytest.mark.parametrize("args, message", [
    ([], "No tls-cert-file configured!"),
    (["--tls-cert-file", "X"], "No tls-key-file configured!"),
    (["--tls-cert-file", "X", "--tls-key-file", "Y"],
     "Either tls-ca-cert-file or tls-ca-cert-dir must be specified"),
])
def test_an_incomplete_tls_configuration_refuses_to_start(node_factory, args, message):
    n = node_factory(*args, tls_port=free_port(), start=False)
    with pytest.raises(Exception, match="exited with code 1"):
        n.start()
    assert message in n.log()


def test_bad_handshakes_close_only_their_connection(tls_node, pki):
    n = tls_node()
    waiter = n.client()
    got = []
    t = threading.Thread(target=lambda: got.append(
        waiter.execute_command("GETJOB", "TIMEOUT", NODE_WAIT_MS, "FROM", "later")))
    t.start()
    wait_until(lambda: b"blocked_clients:1" in tls_call(
        n.port, client_context(pki, pki.client), "INFO", "clients"))
    garbage = [b"\x16\x03\x01\x00\x05hello",             # a torn ClientHello
               b"GET / HTTP/1.1\r\n\r\n",                  # plaintext
               bytes(range(256)) * 4]                      # noise
    for data in garbage:
        with RawConn(n.host, n.port) as r:
            r.send(data)
            assert r.is_closed()
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_call(n.port, client_context(pki, None), "PING")        # no certificate
    # The blocked client is still there and gets its job.
    n.client().execute_command("ADDJOB", "later", "you waited", 0)
    t.join(WAIT_TIMEOUT)
    assert got and got[0][0][2] == b"you waited"


def test_the_sdk_over_tls(tls_node, pki):
    from disquette import Client

    n = tls_node()
    client = Client(f"disque://127.0.0.1:{n.port}", ssl=True, ssl_ca_certs=str(pki.ca.cert_file),
                    ssl_certfile=str(pki.client.cert), ssl_keyfile=str(pki.client.key))
    try:
        jid = client.add_job("sdk", {"over": "tls"})
        (job,) = client.get_jobs("sdk", timeout_ms=1000)
        assert (job.id, job.body) == (jid, {"over": "tls"})
        assert job.ack() == 1
    finally:
        client.close()
