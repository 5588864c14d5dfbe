"""Virtual time: the clock the simulator's and the unit tests' nodes read."""

from __future__ import annotations


class VirtualClock:
    """Integer ms, moved by the caller."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now
