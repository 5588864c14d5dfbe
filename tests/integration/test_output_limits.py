"""client-output-buffer-limit for normal clients: a client that sends commands
and never reads the replies is disconnected once the node holds more than the
hard limit for it (or more than the soft limit for soft-seconds); others are
unaffected. Without a limit (the default) nothing is dropped."""

from __future__ import annotations

import select
import socket
import time

from tests.harness import WAIT_TIMEOUT, encode_command, wait_until

BIG = 200_000


def lazy_reader(node) -> socket.socket:
    """A client with a small receive buffer that will not read."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((node.host, node.port))
    s.setblocking(False)
    return s


def send_echoes(s: socket.socket, n: int, timeout: float = WAIT_TIMEOUT) -> None:
    """Send n big ECHOs, waiting for room as the node reads them (on a loaded
    machine the node reads slowly: giving up at the first full send buffer
    could leave less queued than the kernel buffers absorb). Stops early once
    the node has closed us."""
    request = memoryview(encode_command(b"ECHO", b"x" * BIG) * n)
    deadline = time.monotonic() + timeout
    while request and time.monotonic() < deadline:
        select.select([], [s], [], 0.1)
        try:
            sent = s.send(request)
        except BlockingIOError:
            continue
        except OSError:
            return              # disconnected
        request = request[sent:]


def client_count(c) -> int:
    return int(c.info("clients")["connected_clients"])


def test_hard_limit_disconnects_a_client_that_does_not_read(node):
    c = node.client()
    assert c.config_set("client-output-buffer-limit", "normal 1mb 0 0")
    before = client_count(c)
    s = lazy_reader(node)
    wait_until(lambda: client_count(c) == before + 1)
    send_echoes(s, 100)         # 20 MB of replies, far over 1 MB plus socket buffers
    wait_until(lambda: client_count(c) == before,
               message="the lazy client was not disconnected")
    assert c.execute_command("PING") is True
    assert "output buffer limits" in node.log()
    s.close()


def test_soft_limit_needs_soft_seconds(node):
    c = node.client()
    c.config_set("client-output-buffer-limit", "normal 0 512kb 1")
    before = client_count(c)
    s = lazy_reader(node)
    wait_until(lambda: client_count(c) == before + 1)
    send_echoes(s, 30)
    # Over the soft limit, kept for a second, then dropped.
    wait_until(lambda: client_count(c) == before)
    s.close()


def test_no_limit_by_default_keeps_every_reply(node):
    c = node.client()
    assert c.config_get("client-output-buffer-limit")["client-output-buffer-limit"] \
        .startswith("normal 0 0 0")
    s = lazy_reader(node)
    n = 30
    request = encode_command(b"ECHO", b"x" * BIG)
    s.setblocking(True)
    s.settimeout(10)
    sent = 0
    received = b""
    expected = len(b"$%d\r\n" % BIG) + BIG + 2
    # Send everything first (the node buffers the replies), then read them all.
    while sent < n:
        s.sendall(request)
        sent += 1
    while len(received) < n * expected:
        chunk = s.recv(1 << 20)
        assert chunk, "the node closed a client with no output limit"
        received += chunk
    assert received == (b"$%d\r\n" % BIG + b"x" * BIG + b"\r\n") * n
    s.close()
