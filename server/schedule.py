# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the process schedules on its event loop around the node: the output
driver's flush, once per event-loop turn, and the node's timer (its next
deadline); and the bus's messages handed to the driver with the time.

Every input ends here (a client's command, a bus frame: ``wake_flush``, and
``arm_timer`` when the next deadline moves closer), so this module is compiled
with the core (setup.py, mypyc): the server's own methods, ordinary Python,
would cost an interpreted call and attribute lookups per input.
"""

from __future__ import annotations

from typing import Any, Callable

from server.clock import ProcessClock
from server.driver import OutputDriver


class Schedule:
    """``on_timer`` runs when the node's deadline comes (the Server's: idle
    clients, then the driver's tick); ``driver`` is set once the node is
    composed (composing it needs ``wake_flush`` and ``arm_timer``)."""

    def __init__(self, loop: Any, clock: ProcessClock, on_timer: Callable[[], None]) -> None:
        self.loop = loop
        self.clock = clock
        self.on_timer = on_timer
        self.driver: OutputDriver | None = None
        self.flush_handle: Any = None       # the loop's handle of a flush to come
        self.timer: Any = None              # the loop's handle of the node's timer
        self.timer_deadline = 0             # node time the timer is for

    def wake_flush(self) -> None:
        """The driver flushes once per event-loop turn: one AOF write (and fsync)
        and one bus frame per peer for everything the turn produced."""
        if self.flush_handle is None:
            self.flush_handle = self.loop.call_soon(self.flush)

    def flush(self) -> None:
        handle = self.flush_handle
        if handle is not None:
            handle.cancel()
            self.flush_handle = None
        driver = self.driver
        if driver is not None:
            driver.flush()

    def arm_timer(self, deadline: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer_deadline = deadline
        self.timer = self.loop.call_later(max(0.0, (deadline - self.clock()) / 1000),
                                          self.fire_timer)

    def fire_timer(self) -> None:
        self.timer = None
        self.on_timer()

    def cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def kick_overdue_timer(self) -> None:
        """The event loop's timers follow the monotonic clock as it reads: one
        that stepped back (a faked clock) would hold ours back as long. Any
        input then runs a timer that is due by the node's clock."""
        if self.timer is not None and self.timer_deadline <= self.clock():
            self.timer.cancel()
            self.fire_timer()

    def on_bus_message(self, link: Any, msg: Any) -> None:
        driver = self.driver
        if driver is not None:
            driver.bus_message(link, msg, self.clock())
        self.kick_overdue_timer()
