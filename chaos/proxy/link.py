"""Proxied connections: each is two links (upstream: client -> server,
downstream: server -> client), each link a chain of toxic stages between a
reader task and a writer task (Toxiproxy's ``link.go``).

    source --reader--> q0 --stage 0--> q1 --stage 1--> ... --> W --writer--> dest

Queues are looked up by index when a stage emits, so adding a stage at the end,
or removing one, only re-points its neighbour; nothing already emitted moves
and order is kept.  Reading pauses while more than ``HIGH_WATER`` bytes are in
the link, so a slow toxic pushes back on the sender as TCP would.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
from typing import Any, Callable

from chaos.proxy.stage import Chunk
from chaos.proxy.toxics import DIRECTIONS, UPSTREAM, Noop, ToxicSpec

log = logging.getLogger(__name__)

READ_SIZE = 32 * 1024            # io.Copy's buffer
HIGH_WATER = 4 * 1024 * 1024
CLOSE_GRACE = 5.0                # seconds to flush on close before aborting


class LinkStage:
    """One toxic running on one link: the ``Stage`` (chaos/proxy/stage.py) its
    ``Toxic.pipe`` talks to."""

    def __init__(self, link: "Link", spec: ToxicSpec, index: int) -> None:
        self.link = link
        self.spec = spec
        self.index = index
        self.state = spec.toxic.new_state()
        self.rng = link.conn.rng
        self.closed = False
        self.task: asyncio.Task | None = None

    # -- for toxics ----------------------------------------------------------
    async def get(self) -> Chunk | None:
        return await self.link.queues[self.index].get()

    def put(self, chunk: Chunk | None) -> None:
        if not self.closed:
            self.link.queues[self.index + 1].put_nowait(chunk)
        elif chunk is not None:
            self.discard(chunk)

    def close(self) -> None:
        if not self.closed:
            self.put(None)
            self.closed = True

    def discard(self, chunk: Chunk) -> None:
        self.link.release(len(chunk.data))

    def reset(self) -> None:
        self.closed = True
        self.link.conn.reset()

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    # -- for the link ----------------------------------------------------------
    def start(self) -> None:
        """(Re)run the toxic; toxicity is drawn at each run, as Go's Run does."""
        if self.closed:
            return
        toxic = self.spec.toxic if self.rng.random() < self.spec.toxicity else Noop()
        self.task = asyncio.create_task(self._run(toxic))

    async def _run(self, toxic: Any) -> None:
        try:
            await toxic.pipe(self)
        except asyncio.CancelledError:
            raise
        except Exception:                            # a bug in a toxic: drop the link
            log.exception("toxic %s failed", self.spec.name)
            self.close()

    async def interrupt(self) -> None:
        if self.task and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        self.task = None


class Link:
    """One direction of one connection."""

    def __init__(self, conn: "Connection", direction: str, source: asyncio.StreamReader,
                 dest: asyncio.StreamWriter, chain: list[ToxicSpec]) -> None:
        self.conn = conn
        self.direction = direction
        self.source, self.dest = source, dest
        self.queues: list[asyncio.Queue] = [asyncio.Queue() for _ in range(len(chain) + 1)]
        self.stages = [LinkStage(self, spec, i) for i, spec in enumerate(chain)]
        self.in_flight = 0
        self.room = asyncio.Event()
        self.room.set()
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._write())]
        for stage in self.stages:
            stage.start()

    def release(self, n: int) -> None:
        self.in_flight -= n
        if self.in_flight <= HIGH_WATER:
            self.room.set()

    async def _read(self) -> None:
        try:
            while data := await self.source.read(READ_SIZE):
                self.in_flight += len(data)
                self.queues[0].put_nowait(Chunk(data, LinkStage.now()))
                if self.in_flight > HIGH_WATER:
                    self.room.clear()
                    await self.room.wait()
        except (ConnectionError, OSError):
            pass                                      # a read error ends the stream, as EOF
        self.queues[0].put_nowait(None)

    async def _write(self) -> None:
        queue = self.queues[-1]
        try:
            while (chunk := await queue.get()) is not None:
                self.dest.write(chunk.data)
                await self.dest.drain()
                self.release(len(chunk.data))
        except (ConnectionError, OSError):
            pass
        finally:
            await self.conn.close_side(self.dest)
            self.conn.link_done(self)

    # -- toxic changes (the collection holds its lock) ---------------------------
    def add_toxic(self, spec: ToxicSpec) -> None:
        index = len(self.stages)
        self.queues.insert(index, asyncio.Queue())
        stage = LinkStage(self, spec, index)
        self.stages.append(stage)
        stage.start()

    def _stage_of(self, spec: ToxicSpec) -> LinkStage | None:
        return next((s for s in self.stages if s.spec is spec), None)

    async def update_toxic(self, spec: ToxicSpec) -> None:
        stage = self._stage_of(spec)
        if stage:
            await stage.interrupt()
            stage.start()

    async def remove_toxic(self, spec: ToxicSpec) -> None:
        stage = self._stage_of(spec)
        if stage is None:
            return
        await stage.interrupt()
        if not stage.closed:
            stage.spec.toxic.cleanup(stage)
        i = stage.index
        pending, out = self.queues[i], self.queues[i + 1]
        while not pending.empty():                   # newer than what the stage emitted
            item = pending.get_nowait()
            if stage.closed:
                if item is not None:
                    self.release(len(item.data))
            else:
                out.put_nowait(item)
        del self.queues[i]
        del self.stages[i]
        for later in self.stages[i:]:
            later.index -= 1

    def cancel(self) -> None:
        for task in self.tasks + [s.task for s in self.stages if s.task]:
            task.cancel()


def _linger_zero(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


class Connection:
    """A client connection and its upstream connection, joined by two links."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 chains: dict[str, list[ToxicSpec]], rng: random.Random,
                 on_done: Callable[["Connection"], None]) -> None:
        self.rng = rng
        self.client_writer, self.upstream_writer = client[1], upstream[1]
        self.links = {
            UPSTREAM: Link(self, UPSTREAM, client[0], upstream[1], chains[UPSTREAM]),
            "downstream": Link(self, "downstream", upstream[0], client[1], chains["downstream"]),
        }
        assert set(self.links) == set(DIRECTIONS)
        self._open = set(self.links.values())
        self._on_done = on_done

    def start(self) -> None:
        for link in self.links.values():
            link.start()

    async def close_side(self, writer: asyncio.StreamWriter) -> None:
        """End of one link: close its destination (Go closes the whole socket,
        so the other link then reads EOF from it)."""
        if writer.is_closing():
            return
        writer.close()
        try:
            async with asyncio.timeout(CLOSE_GRACE):
                await writer.wait_closed()
        except (TimeoutError, ConnectionError, OSError):
            writer.transport.abort()

    def link_done(self, link: Link) -> None:
        self._open.discard(link)
        if not self._open:
            self.drop()

    def drop(self, rst: bool = False) -> None:
        """Close both sockets now (a disabled or deleted proxy, or a reset)."""
        for writer in (self.client_writer, self.upstream_writer):
            if rst:
                _linger_zero(writer)
            writer.transport.abort()
        for link in self.links.values():
            link.cancel()
        self._open.clear()
        on_done, self._on_done = self._on_done, None
        if on_done:
            on_done(self)

    def reset(self) -> None:
        self.drop(rst=True)
