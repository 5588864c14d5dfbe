"""Fixtures of the security tests: certificates made once per session, and
nodes that listen with TLS only."""

from __future__ import annotations

import pytest

from disquette.testing import directive_args
from tests.security.security_kit import PKI, TLSNode


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> PKI:
    """A CA with node and client certificates, and an unrelated CA with its own."""
    return PKI(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_node(node_factory, pki):
    """``tls_node(*args, cert=None, client_cert="default", **directives)`` starts
    a node with ``port 0`` and a tls-port (stopped with the node_factory's)."""
    def start(*args, cert=None, client_cert="default", start=True, **directives):
        n = TLSNode(node_factory.base_dir / f"node{len(node_factory.nodes)}", pki,
                    [*map(str, args), *directive_args((), directives)], cert=cert,
                    client_cert=client_cert)
        node_factory.nodes.append(n)
        return n.start() if start else n

    return start
