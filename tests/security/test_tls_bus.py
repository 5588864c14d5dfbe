"""tls-cluster yes: mutual TLS on every bus link, with the node's own files."""

from __future__ import annotations

import socket
import ssl

import pytest

from tests.harness import WAIT_TIMEOUT, RawConn, cluster_info, join, wait_until
from tests.security.security_kit import client_context

TIMEOUT = 1000


def call(n, *args):
    return n.client().execute_command(*args)


def known(n) -> str:
    return cluster_info(n)["cluster_known_nodes"]


def test_tls_cluster_joins_replicates_and_refuses_outsiders(node_factory, pki, tmp_path):
    nodes = [node_factory(*pki.node_args(cert), tls_cluster="yes", cluster_node_timeout=TIMEOUT)
             for cert in (pki.node, pki.node2, pki.ca.issue("node3"))]
    join(nodes)
    a = nodes[0]
    jid = call(a, "ADDJOB", "q", "secret payload", 5000, "REPLICATE", 3)
    assert all(call(n, "SHOW", jid)[1] == jid for n in nodes)

    # The bus port speaks TLS only: plaintext is dropped.
    with RawConn(a.host, a.bus_port) as r:
        r.send(b"\x00\x00\x00\x05hello")
        assert r.is_closed()
    # TLS with a certificate of the cluster's CA is what the bus asks for:
    # no certificate, or one from another CA, and the link is refused.
    for cert in (None, pki.other_client):
        ctx = client_context(pki, cert)
        ctx.check_hostname = False
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with socket.create_connection((a.host, a.bus_port), timeout=WAIT_TIMEOUT) as raw, \
                    ctx.wrap_socket(raw) as s:
                s.sendall(b"\x00\x00\x00\x05hello")
                if not s.recv(1):
                    raise ConnectionError("closed")

    # Nodes whose certificates come from another CA, or that speak plaintext,
    # cannot join (neither side learns the other) and the cluster goes on.
    wrong_ca = node_factory(*pki.node_args(pki.other_node, pki.other_ca), tls_cluster="yes",
                            cluster_node_timeout=TIMEOUT)
    plain = node_factory(cluster_node_timeout=TIMEOUT)
    for n in (wrong_ca, plain):
        assert call(n, "CLUSTER", "MEET", a.host, a.port) == b"OK"
        assert call(a, "CLUSTER", "MEET", n.host, n.port) == b"OK"
    wait_until(lambda: "Bus TLS" in wrong_ca.log() or "Bus TLS" in a.log(),
               message=lambda: wrong_ca.log_tail() + a.log_tail())
    wait_until(lambda: "handshake" not in call(a, "CLUSTER", "NODES").decode())
    assert known(a) == "3" and known(wrong_ca) == "1" and known(plain) == "1"
    assert call(a, "SHOW", call(a, "ADDJOB", "q", "x", 5000, "REPLICATE", 3))[7] == 3


def test_tls_and_authentication_together_and_new_certificates(node_factory, pki):
    a, b = (node_factory(*pki.node_args(cert), tls_cluster="yes", cluster_auth_pass="s",
                         cluster_node_timeout=TIMEOUT) for cert in (pki.node, pki.node2))
    join([a, b])
    assert call(b, "SHOW", call(a, "ADDJOB", "q", "x", 5000, "REPLICATE", 2))[7] == 2
    # New files for the bus at run time: established links stay, new ones use them.
    fresh = pki.ca.issue("fresh")
    assert call(a, "CONFIG", "SET", "tls-cert-file", str(fresh.cert),
                "tls-key-file", str(fresh.key)) == b"OK"
    ctx = client_context(pki, pki.client)
    ctx.check_hostname = False
    with socket.create_connection((a.host, a.bus_port), timeout=WAIT_TIMEOUT) as raw, \
            ctx.wrap_socket(raw) as s:
        assert dict(x[0] for x in s.getpeercert()["subject"])["commonName"] == "fresh"
    assert call(b, "SHOW", call(a, "ADDJOB", "q", "y", 5000, "REPLICATE", 2))[7] == 2
    # Turning TLS off on one side re-opens its links in plaintext: the other
    # side refuses them until it does the same.
    assert call(a, "CONFIG", "SET", "tls-cluster", "no") == b"OK"
    wait_until(lambda: cluster_info(a)["cluster_reachable_nodes"] == "0")
    assert call(b, "CONFIG", "SET", "tls-cluster", "no") == b"OK"
    wait_until(lambda: cluster_info(a)["cluster_reachable_nodes"] == "1"
               and cluster_info(b)["cluster_reachable_nodes"] == "1")
    assert call(b, "SHOW", call(a, "ADDJOB", "q", "z", 5000, "REPLICATE", 2))[7] == 2
