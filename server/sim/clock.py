"""Virtual time: the clock the simulator's and the unit tests' nodes read, and
time and timers as the server's pieces outside the node read them (the AOF
writer's clock and event loop: server/aof_runtime.py), in that virtual time."""

from __future__ import annotations

import heapq


class VirtualClock:
    """Integer ms, moved by the caller."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


class TimeView:
    """The time module's clocks over a virtual ms clock, which stands still
    while a step runs: nothing takes time (a rewrite slice walks every shard in
    one go, an fsync lasts 0 ns), so the performance counters, read only for
    durations, stand still too."""

    def __init__(self, clock) -> None:
        self.clock = clock

    def monotonic(self) -> float:
        return self.clock() / 1000

    def monotonic_ns(self) -> int:
        return self.clock() * 1_000_000

    time = monotonic
    perf_counter = staticmethod(float)      # 0.0
    perf_counter_ns = staticmethod(int)     # 0


class Timer:
    """A callback due at some virtual time (an event loop's handle)."""

    __slots__ = ("fn", "args", "cancelled")

    def __init__(self, fn, args) -> None:
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        if not self.cancelled:
            self.fn(*self.args)


class VirtualLoop:
    """What the AOF writer asks of its event loop (``call_soon``,
    ``call_later``, ``call_soon_threadsafe``), in virtual time: each callback
    becomes a Timer handed to ``post(delay_ms, timer)``, which runs it that much
    later (after the step that posted it, for ``call_soon``)."""

    def __init__(self, post) -> None:
        self.post = post

    def call_later(self, delay: float, fn, *args) -> Timer:
        timer = Timer(fn, args)
        self.post(round(delay * 1000), timer)
        return timer

    def call_soon(self, fn, *args) -> Timer:
        return self.call_later(0, fn, *args)

    call_soon_threadsafe = call_soon


class Timers:
    """The timers of a node that runs alone (server/sim/inprocess.py), run as
    its clock moves on."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.queue: list = []
        self.seq = 0

    def post(self, delay_ms: int, timer: Timer) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.clock() + delay_ms, self.seq, timer))

    def run_due(self) -> None:
        queue = self.queue
        while queue and queue[0][0] <= self.clock():
            heapq.heappop(queue)[2].run()
