"""Helpers for the security tests: nodes that speak TLS only, TLS clients,
a raw cluster-bus peer that builds its own frames (to inject, forge and replay
them), and a relay that records and tampers with one bus link."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from protocol import bus as B
from tests.harness import HOST, WAIT_TIMEOUT, NodeProcess, encode_command, in_ci, resp_frame_end
from tests.security.certs import CA


# ---------------------------------------------------------------------------
# certificates
# ---------------------------------------------------------------------------

class PKI:
    """What the tests need: the cluster's CA with certificates for nodes and
    clients, and an unrelated CA with its own (the wrong CA)."""

    def __init__(self, directory: Path) -> None:
        self.ca = CA(directory, "ca")
        self.node = self.ca.issue("node")
        self.node2 = self.ca.issue("node2")
        self.client = self.ca.issue("client", server=False)
        self.other_ca = CA(directory, "other")
        self.other_node = self.other_ca.issue("node")
        self.other_client = self.other_ca.issue("client", server=False)

    def node_args(self, issued=None, ca: CA | None = None) -> list[str]:
        """The tls-* options of a node with ``issued`` (default: ``node``)."""
        issued = issued or self.node
        return ["--tls-cert-file", str(issued.cert), "--tls-key-file", str(issued.key),
                "--tls-ca-cert-file", str((ca or self.ca).cert_file)]


def client_context(pki: PKI, cert=None, ca: CA | None = None, **versions: Any) -> ssl.SSLContext:
    """A client TLS context trusting ``ca`` (the cluster's) that presents
    ``cert`` (none if None); ``minimum_version``/``maximum_version`` pass through."""
    ctx = ssl.create_default_context(cafile=str((ca or pki.ca).cert_file))
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    for k, v in versions.items():
        setattr(ctx, k, v)
    return ctx


def tls_call(port: int, ctx: ssl.SSLContext, *args: Any, host: str = HOST,
             timeout: float = WAIT_TIMEOUT) -> bytes:
    """One command over a fresh TLS connection; its raw reply line(s)."""
    with socket.create_connection((host, port), timeout=timeout) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as s:
        s.sendall(encode_command(*args))
        buf = b""
        while resp_frame_end(buf) is None:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {buf!r}")
            buf += chunk
        return buf


class TLSNode(NodeProcess):
    """A node that listens for clients with TLS only (``port 0``): ``port`` is
    its tls-port (so the bus is port + 10000, as for any node), the readiness
    probe and ``client()`` speak TLS with the PKI's client certificate."""

    def __init__(self, dir, pki: PKI, args=(), port: int | None = None, cert=None,
                 client_cert="default") -> None:
        super().__init__(dir, port, args)
        self.pki = pki
        self.cert = cert or pki.node
        self.client_cert = pki.client if client_cert == "default" else client_cert

    def argv(self) -> list[str]:
        return [*self.command, "--port", "0", "--tls-port", str(self.port), "--dir", str(self.dir),
                *self.pki.node_args(self.cert), *self.args]

    def context(self) -> ssl.SSLContext:
        return client_context(self.pki, self.client_cert)

    def ping(self) -> bytes | None:
        try:
            return tls_call(self.port, self.context(), "PING", timeout=1.0)
        except (OSError, ConnectionError):
            return None

    def client(self, protocol: int = 3, **kwargs: Any) -> redis.Redis:
        kwargs.setdefault("ssl", True)
        kwargs.setdefault("ssl_ca_certs", str(self.pki.ca.cert_file))
        if self.client_cert is not None:
            kwargs.setdefault("ssl_certfile", str(self.client_cert.cert))
            kwargs.setdefault("ssl_keyfile", str(self.client_cert.key))
        return super().client(protocol, **kwargs)

    def cli(self, *args: Any, **kwargs: Any) -> Any:
        c = self.client_cert
        tls = ["--tls", "--cacert", str(self.pki.ca.cert_file)]
        if c is not None:
            tls += ["--cert", str(c.cert), "--key", str(c.key)]
        return super().cli(*tls, *args, **kwargs)


# ---------------------------------------------------------------------------
# addresses
# ---------------------------------------------------------------------------

def non_loopback_ipv4() -> str:
    """An IPv4 address of this machine that is not loopback (a test can bind
    a client socket to it and look like another host). Missing: the test fails
    under CI and skips locally."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    msg = "this machine has no non-loopback IPv4 address to connect from"
    if in_ci():
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


# ---------------------------------------------------------------------------
# a raw bus peer
# ---------------------------------------------------------------------------

def fake_node_id() -> str:
    return secrets.token_hex(20)


class RawBus:
    """A TCP connection to a node's bus port that speaks the frames of
    protocol/bus.py by hand: ``sent`` keeps every byte written (to replay)."""

    def __init__(self, port: int, host: str = HOST, timeout: float = WAIT_TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sent = b""
        self.reader = B.FrameReader()
        self.signer: B.FrameSigner | None = None

    def send(self, data: bytes) -> None:
        self.sent += data
        self.sock.sendall(data)

    def send_message(self, msg: B.BusMessage) -> None:
        frame = B.encode_frame(msg)
        self.send(frame + (self.signer.tag(frame) if self.signer is not None else b""))

    def _fill(self) -> bool:
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            return False
        if chunk:
            self.reader.feed(chunk)
        return bool(chunk)

    def read_auth(self) -> B.AuthMessage:
        while True:
            m = self.reader.next_auth()
            if m is not None:
                return m
            if not self._fill():
                raise ConnectionError("closed (or silent) before a handshake message")

    def read_message(self) -> B.BusMessage:
        while True:
            for m in self.reader:
                return m
            if not self._fill():
                raise ConnectionError("closed (or silent) before a bus message")

    def handshake(self, secret_list: list[str]) -> B.AuthMessage:
        """The dialer's side of the challenge-response with ``secret_list``;
        returns the node's ACCEPT (and keys the link) or raises ConnectionError."""
        nonce = os.urandom(B.AUTH_NONCE_SIZE)
        self.send(B.encode_auth(B.AuthMessage(B.AUTH_HELLO, nonce=nonce)))
        hello = self.read_auth()
        assert hello.kind == B.AUTH_HELLO
        self.send(B.encode_auth(B.AuthMessage(B.AUTH_PROOF, macs=tuple(
            B.auth_proof(s, "dialer", nonce, hello.nonce) for s in secret_list))))
        accept = self.read_auth()
        assert accept.kind == B.AUTH_ACCEPT
        secret = secret_list[accept.index]
        assert accept.mac == B.auth_proof(secret, "listener", nonce, hello.nonce)
        to_listener, to_dialer = B.session_keys(secret, nonce, hello.nonce)
        self.signer = B.FrameSigner(to_listener)
        self.reader.authenticate(to_dialer)
        return accept

    def is_closed(self, timeout: float = WAIT_TIMEOUT) -> bool:
        """True once the node closes the connection (what it sends meanwhile is
        read and dropped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# ---------------------------------------------------------------------------
# a relay in the middle of one bus link
# ---------------------------------------------------------------------------

class Relay:
    """Forwards connections from a local port to ``target`` (a node's bus
    port) and records what the dialer sends on each, split into frames as
    an authenticated link carries them: the handshake's frames, then frames
    each followed by its tag. ``inject(i, data)`` writes bytes into the i-th
    connection's stream towards the target, as a man in the middle would."""

    def __init__(self, target_port: int, host: str = HOST) -> None:
        self.target = (host, target_port)
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.streams: list[bytearray] = []
        self._upstreams: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                down, _ = self.server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.target, timeout=WAIT_TIMEOUT)
            except OSError:
                down.close()
                continue
            up.settimeout(None)
            stream = bytearray()
            with self._lock:
                self.streams.append(stream)
                self._upstreams.append(up)
            threading.Thread(target=self._pipe, args=(down, up, stream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, None), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        # The recorded direction is forwarded a whole frame at a time, so that
        # an injection lands between two frames.
        pending, handshake = b"", 2
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is None:
                    dst.sendall(data)
                    continue
                pending += data
                while len(pending) >= 4:
                    n = int.from_bytes(pending[:4], "big")
                    end = 4 + n + (0 if handshake else B.AUTH_TAG_SIZE)
                    if len(pending) < end:
                        break
                    unit, pending = pending[:end], pending[end:]
                    with self._lock:
                        record += unit
                        dst.sendall(unit)
                    handshake = max(0, handshake - 1)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def frames(self, i: int = 0) -> list[bytes]:
        """The data frames (each with its tag) the dialer sent on connection i,
        after its two handshake frames."""
        with self._lock:
            data = bytes(self.streams[i])
        out, pos, handshake = [], 0, 2
        while pos + 4 <= len(data):
            n = int.from_bytes(data[pos:pos + 4], "big")
            end = pos + 4 + n + (0 if handshake else B.AUTH_TAG_SIZE)
            if end > len(data):
                break
            if handshake:
                handshake -= 1
            else:
                out.append(data[pos:end])
            pos = end
        return out

    def recorded(self, i: int = 0) -> bytes:
        with self._lock:
            return bytes(self.streams[i])

    def inject(self, i: int, data: bytes) -> None:
        with self._lock:
            self._upstreams[i].sendall(data)

    def close(self) -> None:
        self._closing = True
        self.server.close()
        with self._lock:
            for s in self._upstreams:
                with contextlib.suppress(OSError):
                    s.close()
