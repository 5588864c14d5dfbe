"""What flows through a link (``Chunk``) and what a toxic sees of the link it
runs on (``Stage``, Go's ToxicStub): toxics.py writes against these, link.py
provides them (its ``LinkStage``), so neither imports the other's half."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(slots=True)
class Chunk:
    data: bytes
    ts: float          # loop time it was read; latency toxics move it forward


class Stage(Protocol):
    """One toxic running on one link."""

    state: Any              # the toxic's per-connection state (Toxic.new_state)
    rng: random.Random      # the proxy's seeded generator

    async def get(self) -> Chunk | None:
        """The next chunk; None at the end of the stream."""

    def put(self, chunk: Chunk | None) -> None:
        """Pass a chunk on to the next stage (None ends the stream)."""

    def close(self) -> None:
        """End the stream downstream of this stage."""

    def discard(self, chunk: Chunk) -> None:
        """Drop a chunk (its bytes no longer count against the link)."""

    def reset(self) -> None:
        """Reset the whole connection (TCP RST)."""

    def now(self) -> float:
        """The event loop's clock, as chunks are stamped."""
