"""The toxics, as Toxiproxy defines them (``toxics/*.go``).

A toxic is a stage in one direction of a connection.  ``pipe(stage)`` (a
``Stage``, chaos/proxy/stage.py) reads
chunks with ``await stage.get()`` (``None`` is end of stream), passes them on
with ``stage.put``, ends the stream with ``stage.close()``.  Toxiproxy
interrupts a running toxic to add, update or remove one; here that is task
cancellation, and a toxic cancelled while holding a chunk passes it on first,
as the Go code does ("don't drop any data on the floor").

Units are Toxiproxy's: milliseconds, except the slicer's delay (microseconds);
bandwidth in KB/s with KB = 1000 bytes.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from chaos.proxy.gojson import INT, INT64
from chaos.proxy.stage import Chunk, Stage

UPSTREAM, DOWNSTREAM = "upstream", "downstream"
DIRECTIONS = (UPSTREAM, DOWNSTREAM)          # Toxiproxy's order: upstream chain first


class Toxic:
    """Attributes of one toxic type (the ``attributes`` JSON object)."""

    type_name: ClassVar[str]
    fields: ClassVar[dict[str, str]] = {}

    def __init__(self, **attributes: Any) -> None:
        for name in self.fields:
            setattr(self, name, attributes.get(name, 0))

    def attributes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.fields}

    def new_state(self) -> Any:
        """Per-connection state that survives updates (Go's StatefulToxic)."""
        return None

    async def pipe(self, stage: Stage) -> None:
        raise NotImplementedError

    def cleanup(self, stage: Stage) -> None:
        """Called when the toxic is removed from a live connection."""


class Noop(Toxic):
    type_name = "noop"

    async def pipe(self, stage: Stage) -> None:
        while (chunk := await stage.get()) is not None:
            stage.put(chunk)
        stage.close()


class Latency(Toxic):
    """Delays every chunk by latency +/- jitter, counted from when it was read."""

    type_name = "latency"
    fields = {"latency": INT64, "jitter": INT64}

    def delay(self, rng: random.Random) -> float:
        ms = self.latency
        if self.jitter > 0:
            ms += rng.randrange(self.jitter * 2) - self.jitter
        return ms / 1000

    async def pipe(self, stage: Stage) -> None:
        while (chunk := await stage.get()) is not None:
            sleep = self.delay(stage.rng) - (stage.now() - chunk.ts)
            try:
                await asyncio.sleep(max(sleep, 0))
            except asyncio.CancelledError:
                stage.put(chunk)
                raise
            chunk.ts += sleep
            stage.put(chunk)
        stage.close()


class Bandwidth(Toxic):
    """Passes ``rate`` KB/s; 0 stalls the stream (as in Toxiproxy)."""

    type_name = "bandwidth"
    fields = {"rate": INT64}

    async def pipe(self, stage: Stage) -> None:
        debt = 0.0                      # seconds owed, corrected by oversleep
        rate = self.rate
        while (chunk := await stage.get()) is not None:
            try:
                if rate <= 0:
                    debt = 0.0
                    await asyncio.Event().wait()       # Go loops forever sending nothing
                debt += len(chunk.data) / (rate * 1000)
                piece = rate * 100                     # 100 ms worth
                while len(chunk.data) > piece:
                    await asyncio.sleep(0.1)
                    stage.put(Chunk(chunk.data[:piece], chunk.ts))
                    chunk.data = chunk.data[piece:]
                    debt -= 0.1
                start = stage.now()
                await asyncio.sleep(max(debt, 0))
                debt -= stage.now() - start
            except asyncio.CancelledError:
                stage.put(chunk)
                raise
            stage.put(chunk)
        stage.close()


class SlowClose(Toxic):
    """Delays the close of the stream by ``delay`` ms."""

    type_name = "slow_close"
    fields = {"delay": INT64}

    async def pipe(self, stage: Stage) -> None:
        while (chunk := await stage.get()) is not None:
            stage.put(chunk)
        try:
            await asyncio.sleep(self.delay / 1000)
        finally:
            stage.close()


class Timeout(Toxic):
    """Drops all data; closes the connection after ``timeout`` ms without data
    (the timer restarts with each chunk, as Go's select loop does), or never
    when 0.  Removing it closes the connection: the stream has lost data."""

    type_name = "timeout"
    fields = {"timeout": INT64}

    async def pipe(self, stage: Stage) -> None:
        while True:
            if self.timeout > 0:
                try:
                    async with asyncio.timeout(self.timeout / 1000):
                        chunk = await stage.get()
                except TimeoutError:
                    stage.close()
                    return
            else:
                chunk = await stage.get()
            if chunk is None:
                stage.close()
                return
            stage.discard(chunk)

    def cleanup(self, stage: Stage) -> None:
        stage.close()


class ResetPeer(Toxic):
    """On the first data (or end of stream), waits ``timeout`` ms then resets
    both sides of the connection with a TCP RST (SO_LINGER 0).  Toxiproxy sets
    the linger only on connections opened while the toxic exists; we reset
    connections opened before it too."""

    type_name = "reset_peer"
    fields = {"timeout": INT64}

    async def pipe(self, stage: Stage) -> None:
        chunk = await stage.get()
        if chunk is not None:
            stage.discard(chunk)
        try:
            await asyncio.sleep(self.timeout / 1000)
        finally:                        # Go's wait is not interruptible: reset anyway
            stage.reset()


class Slicer(Toxic):
    """Slices each chunk into pieces of about ``average_size`` +/-
    ``size_variation`` bytes, ``delay`` microseconds apart."""

    type_name = "slicer"
    fields = {"average_size": INT, "size_variation": INT, "delay": INT}

    def offsets(self, start: int, end: int, rng: random.Random) -> list[int]:
        # Go recurses for ever on average_size 0 and slices backwards when the
        # variation reaches the average; clamp both instead of crashing.
        average = max(self.average_size, 1)
        variation = max(self.size_variation, 0)
        if (end - start) - average <= variation:
            return [start, end]
        mid = start + (end - start) // 2
        if variation > 0:
            mid += rng.randrange(variation * 2) - variation
        mid = min(max(mid, start + 1), end - 1)
        return self.offsets(start, mid, rng) + self.offsets(mid, end, rng)

    async def pipe(self, stage: Stage) -> None:
        while (chunk := await stage.get()) is not None:
            cuts = self.offsets(0, len(chunk.data), stage.rng)
            for i in range(1, len(cuts), 2):
                stage.put(Chunk(chunk.data[cuts[i - 1]:cuts[i]], chunk.ts))
                try:
                    await asyncio.sleep(self.delay / 1_000_000)
                except asyncio.CancelledError:
                    if cuts[i] < len(chunk.data):
                        stage.put(Chunk(chunk.data[cuts[i]:], chunk.ts))
                    raise
        stage.close()


@dataclass
class LimitState:
    transmitted: int = 0


class LimitData(Toxic):
    """Passes ``bytes`` bytes, then closes the connection."""

    type_name = "limit_data"
    fields = {"bytes": INT64}

    def new_state(self) -> LimitState:
        return LimitState()

    async def pipe(self, stage: Stage) -> None:
        state: LimitState = stage.state
        remaining = self.bytes - state.transmitted
        while (chunk := await stage.get()) is not None:
            remaining = max(remaining, 0)
            if remaining < len(chunk.data):
                stage.discard(Chunk(chunk.data[remaining:], chunk.ts))
                chunk.data = chunk.data[:remaining]
            if chunk.data:
                stage.put(chunk)
                state.transmitted += len(chunk.data)
            remaining = self.bytes - state.transmitted
            if remaining <= 0:
                break
        stage.close()


TOXIC_TYPES: dict[str, type[Toxic]] = {
    cls.type_name: cls
    for cls in (Noop, Latency, Bandwidth, SlowClose, Timeout, ResetPeer, Slicer, LimitData)
}


@dataclass(eq=False)
class ToxicSpec:
    """One toxic of a proxy (Go's ToxicWrapper): what the API shows and the
    attributes every connection's stage runs with."""

    name: str
    type: str
    stream: str                     # as given ("UpStream" stays so); direction is parsed
    toxicity: float
    toxic: Toxic

    @property
    def direction(self) -> str:
        return self.stream.lower()

    def to_json(self) -> dict[str, Any]:
        return {"attributes": self.toxic.attributes(), "name": self.name,
                "type": self.type, "stream": self.stream, "toxicity": self.toxicity}
