"""The simulated network between the simulator's hosts (server/sim/simulation.py):
partitions (both ways) and one-way cuts, and what happens to each message on a
path that is up: dropped, duplicated, delayed (two messages on one path may
overtake each other). Every draw comes from the simulation's network stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from protocol.bus import decode_body, encode_body


@dataclass
class NetworkConfig:
    """Per-message faults. Reordering comes from random latency (two messages on
    the same path overtake each other) plus ``reorder``: a chance of an extra delay
    up to ``reorder_delay``."""

    min_latency: int = 1
    max_latency: int = 10
    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay: int = 100


class Network:
    """Which paths are cut, and the fate of a message sent on one that is not."""

    def __init__(self, config: NetworkConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng
        self._blocked: dict[tuple[str, str], bool] = {}   # (src, dst) host names -> cut

    def partition(self, groups) -> None:
        """Cut every path between different groups, both ways. Hosts in no group
        keep talking to everyone."""
        for gi, ga in enumerate(groups):
            for gj, gb in enumerate(groups):
                if gi != gj:
                    for a in ga:
                        for b in gb:
                            self._blocked[(a, b)] = True

    def cut(self, src: str, dst: str) -> None:
        """One-way partition: what ``src`` sends to ``dst`` is lost."""
        self._blocked[(src, dst)] = True

    def heal(self) -> None:
        self._blocked.clear()

    def blocked(self, src: str, dst: str) -> bool:
        return (src, dst) in self._blocked

    def latencies(self) -> list[int]:
        """The delays (ms) of the copies of one message that arrive: none when
        it is dropped, two when it is duplicated."""
        rng = self.rng
        net = self.config
        if net.drop and rng.random() < net.drop:
            return []
        copies = 2 if net.duplicate and rng.random() < net.duplicate else 1
        out = []
        for _ in range(copies):
            latency = rng.randint(net.min_latency, net.max_latency)
            if net.reorder and rng.random() < net.reorder:
                latency += rng.randint(1, net.reorder_delay)
            out.append(latency)
        return out


def bus_codec(msg):
    """Round-trip a message through the real wire format (catches anything the
    membership puts in a message that msgpack or the decoder would not carry)."""
    return decode_body(encode_body(msg))
