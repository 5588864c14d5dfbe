"""protected-mode, as Redis: no password and a client from another host ->
Redis' DENIED reply and the connection closed. "Another host" is this
machine's own non-loopback address: a client socket bound to it reaches the
node from an address that is not loopback."""

from __future__ import annotations

import socket

import pytest

from server.resp import DENIED
from tests.harness import WAIT_TIMEOUT, RawConn, encode_command, free_port, resp_frame_end
from tests.security.security_kit import client_context, non_loopback_ipv4, tls_call

REDIS_DENIED = (
    b"-DENIED Redis is running in protected mode because protected mode is enabled and no "
    b"password is set for the default user. In this mode connections are only accepted from "
    b"the loopback interface. If you want to connect from external computers to Redis you may "
    b"adopt one of the following solutions: 1) Just disable protected mode sending the "
    b"command 'CONFIG SET protected-mode no' from the loopback interface by connecting to "
    b"Redis from the same host the server is running, however MAKE SURE Redis is not publicly "
    b"accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. "
    b"2) Alternatively you can just disable the protected mode by editing the Redis "
    b"configuration file, and setting the protected mode option to 'no', and then restarting "
    b"the server. 3) If you started the server manually just for testing, restart it with "
    b"the '--protected-mode no' option. 4) Set up an authentication password for the default "
    b"user. NOTE: You only need to do one of the above things in order for the server to "
    b"start accepting connections from the outside.\r\n")


def from_outside(ip: str, port: int, *args) -> bytes:
    """One command from a socket bound to ``ip`` (not loopback): its reply, and
    b"<closed>" appended if the node closed the connection after it."""
    with socket.create_connection((ip, port), timeout=WAIT_TIMEOUT, source_address=(ip, 0)) as s:
        assert not s.getsockname()[0].startswith("127.")
        s.sendall(encode_command(*args))
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return buf + b"<closed>"
            buf += chunk
            if resp_frame_end(buf) is not None and not buf.startswith(b"-DENIED"):
                return buf


def rejected(n) -> int:
    return n.client().info("stats")["rejected_connections"]


def test_denied_text_is_redis_word_for_word():
    assert DENIED == REDIS_DENIED


def test_clients_from_other_hosts_are_denied_without_a_password(node_factory):
    ip = non_loopback_ipv4()
    n = node_factory(bind=["127.0.0.1", ip])
    assert from_outside(ip, n.port, "PING") == REDIS_DENIED + b"<closed>"
    assert rejected(n) == 1
    # Loopback clients are served, whichever address they connect to.
    assert n.client().ping()
    with RawConn(n.host, n.port) as r:
        assert r.call("PING") == b"+PONG\r\n"

    # A password lifts it (the client must still AUTH)...
    c = n.client()
    assert c.config_set("requirepass", "pw")
    assert from_outside(ip, n.port, "PING").startswith(b"-NOAUTH")
    assert from_outside(ip, n.port, "AUTH", "pw") == b"+OK\r\n"
    c.execute_command("AUTH", "pw")
    assert c.config_set("requirepass", "")
    assert from_outside(ip, n.port, "PING") == REDIS_DENIED + b"<closed>"
    # ... and so does protected-mode no, at run time.
    assert c.config_set("protected-mode", "no")
    assert from_outside(ip, n.port, "PING") == b"+PONG\r\n"
    assert c.config_get("protected-mode") == {"protected-mode": "no"}


def test_protected_mode_covers_the_tls_port(node_factory, pki):
    ip = non_loopback_ipv4()
    tls_port = free_port()
    n = node_factory(*pki.node_args(), bind=["127.0.0.1", ip], tls_port=tls_port)
    ctx = client_context(pki, pki.client)
    with socket.create_connection((ip, tls_port), timeout=WAIT_TIMEOUT,
                                  source_address=(ip, 0)) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(encode_command("PING"))
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
    assert buf == REDIS_DENIED
    assert tls_call(tls_port, ctx, "PING") == b"+PONG\r\n"


@pytest.mark.parametrize("peer, local", [
    (("127.0.0.1", 5), True), (("127.9.9.9", 5), True), (("::1", 5, 0, 0), True),
    (("::ffff:127.0.0.1", 5, 0, 0), True), (("192.0.2.7", 5), False),
    (("::ffff:192.0.2.7", 5, 0, 0), False), (("fd00::2", 5, 0, 0), False), ("", True),
])
def test_what_counts_as_local(peer, local):
    from server.resp import is_local

    assert is_local(peer) is local
