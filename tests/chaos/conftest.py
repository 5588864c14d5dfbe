"""Fixtures for the chaos suite's tests: the fault proxy as a real process
(``python -m chaos.proxy --port 0``), real TCP servers behind it."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
import requests

from chaos.launcher import stop_process
from disquette.testing import death_signal
from tests.harness import REPO_ROOT, WAIT_TIMEOUT


class ProxyProcess:
    """``python -m chaos.proxy`` on a free port; ``url``, ``host``, ``port``."""

    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO_ROOT))
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "chaos.proxy", "--port", "0", "--seed", "7", *args],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
                preexec_fn=death_signal())
        line = self._ready_line()
        # "chaos.proxy: API on http://127.0.0.1:PORT (Toxiproxy API X)"
        self.url = line.split()[3]
        self.host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    def _ready_line(self) -> str:
        deadline = time.monotonic() + WAIT_TIMEOUT
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline().decode()
                if line.startswith("chaos.proxy: API on "):
                    return line
            if self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"chaos.proxy did not start:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def delete_all(self) -> None:
        for name in requests.get(self.url + "/proxies", timeout=WAIT_TIMEOUT).json():
            requests.delete(f"{self.url}/proxies/{name}", timeout=WAIT_TIMEOUT)

    def stop(self) -> int | None:
        code = stop_process(self.proc)
        self.proc.stdout.close()
        return code


@pytest.fixture(scope="module")
def proxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    server = ProxyProcess(tmp_path_factory.mktemp("chaos-proxy") / "proxy.log")
    yield server
    server.stop()


@pytest.fixture
def api(proxy_server: ProxyProcess) -> Iterator[ProxyProcess]:
    """The module's proxy server, emptied after each test."""
    yield proxy_server
    proxy_server.delete_all()


@dataclass
class TcpServer:
    """A real TCP server on loopback: ``echo`` sends back what it reads,
    ``sink`` only reads, ``close`` closes each connection at once.  Every read
    is kept with its arrival time in ``reads``."""

    mode: str
    port: int = 0
    reads: list[tuple[float, bytes]] = field(default_factory=list)
    server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> "TcpServer":
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while self.mode != "close" and (data := await reader.read(65536)):
                self.reads.append((time.monotonic(), data))
                if self.mode == "echo":
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def received(self) -> bytes:
        return b"".join(data for _, data in self.reads)

    async def wait_received(self, n: int, timeout: float = WAIT_TIMEOUT) -> bytes:
        async with asyncio.timeout(timeout):
            while len(self.received()) < n:
                await asyncio.sleep(0.005)
        return self.received()

    async def close(self) -> None:
        if self.server:
            self.server.close()


@pytest.fixture
async def tcp_servers() -> AsyncIterator:
    """``await tcp_servers("echo"|"sink"|"close")`` -> a started TcpServer."""
    started: list[TcpServer] = []

    async def make(mode: str) -> TcpServer:
        started.append(await TcpServer(mode).start())
        return started[-1]
    yield make
    for server in started:
        await server.close()
