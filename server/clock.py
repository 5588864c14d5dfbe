# compiled: mypyc (setup.py builds each module whose first line this is)
"""The node's clock (ext): integer ms that a stepped system clock cannot send back.

Disque reads the wall clock for every decision; a wall clock stepped by NTP, an
operator or a VM resume then expires and re-queues jobs early (forward) or
stalls them (back). Our node reads the wall clock once, at start, and from then
on counts the monotonic clock's progress (docs/operations.md, Clocks):

- a step of the wall clock does nothing (the monotonic clock does not move);
- the node's clock never goes back: a backward step of the reading (a faked
  monotonic clock, as libfaketime makes one) is ignored, and owed: the next
  forward steps larger than ``STEP_MS`` pay it back before they count, so a
  clock strobing back and forth does not race ahead (it runs slow, if
  anything: late is safe, early is not);
- a forward step is counted: the node cannot tell it from a real stall
  (SIGSTOP, a VM pause), after which the time did pass.

:class:`SteadyClock` is pure (readings in, node time out), so the simulator's
hosts (server/sim/broker_node.py) run the same rule on their jumping clocks;
:func:`process_clock` feeds it the real clocks.
"""

from __future__ import annotations

import time
from typing import Callable, Final

# A node reads its clock at least every cluster cron (100 ms) while healthy: a
# larger step is a stall or a jump, and repays what a backward step left owed.
STEP_MS: Final = 1000


class SteadyClock:
    """Node time from successive readings of a clock that may step."""

    def __init__(self, reading: int) -> None:
        self.now = reading          # the node's time, ms
        self.last = reading         # the last reading
        self.owed = 0               # backward steps not yet repaid, ms

    def read(self, reading: int) -> int:
        step = reading - self.last
        self.last = reading
        if step < 0:
            self.owed -= step
        elif step:
            if self.owed and step > STEP_MS:
                repaid = min(self.owed, step)
                self.owed -= repaid
                step -= repaid
            self.now += step
        return self.now


class ProcessClock:
    """() -> ms: the wall clock read once, then the monotonic clock's progress
    through a SteadyClock. A class, not a closure, so that the compiled build
    (setup.py) makes every read of the node's clock a C call."""

    def __init__(self, wall_ns: Callable[[], int], monotonic_ns: Callable[[], int]) -> None:
        self.monotonic_ns = monotonic_ns
        self.start = wall_ns() // 1_000_000 - monotonic_ns() // 1_000_000
        self.steady = SteadyClock(self.start + monotonic_ns() // 1_000_000)

    def __call__(self) -> int:
        return self.steady.read(self.start + self.monotonic_ns() // 1_000_000)


def process_clock(wall_ns: Callable[[], int] = time.time_ns,
                  monotonic_ns: Callable[[], int] = time.monotonic_ns) -> ProcessClock:
    """() -> ms: the wall clock read once, then the monotonic clock's progress."""
    return ProcessClock(wall_ns, monotonic_ns)
