"""``disquette worker ... --processes N``: N worker processes, one supervisor.

The supervisor starts N children, each the same ``disquette worker`` command
line without ``--processes`` (so each imports the app and connects on its
own), with ``DISQUETTE_WORKER_INDEX`` set to 0..N-1.  SIGTERM or SIGINT is
passed to every child, which stops gracefully (docs/sdk.md#shutdown); a
second one is passed on too and ends them at once.  A child that exits on
its own is started again (after a second, so a crash loop does not spin);
the supervisor exits once every child has exited after a signal: 0 when
all stopped gracefully, 130 after a forced stop, else the first non-zero
status.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

log = logging.getLogger("disquette.supervisor")

RESTART_DELAY = 1.0
POLL = 0.1


def child_argv(argv: list[str]) -> list[str]:
    """``argv`` (the command's arguments) without ``--processes N``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--processes":
            skip = True
        elif not arg.startswith("--processes="):
            out.append(arg)
    return out


class Supervisor:
    def __init__(self, argv: list[str], processes: int) -> None:
        self.command = [sys.executable, "-m", "disquette", *child_argv(argv)]
        self.n = processes
        self.children: list[subprocess.Popen | None] = [None] * processes
        self.restart_at = [0.0] * processes
        self.signals = 0

    def _start(self, i: int) -> None:
        env = {**os.environ, "DISQUETTE_WORKER_INDEX": str(i)}
        self.children[i] = subprocess.Popen(self.command, env=env)
        log.info("worker %d started (pid %d)", i, self.children[i].pid)  # type: ignore

    def _on_signal(self, sig: int, frame: object) -> None:
        self.signals += 1
        name = signal.Signals(sig).name
        log.warning("%s: passing it to %d workers%s", name, self.n,
                    " (again: they exit at once)" if self.signals > 1 else "")
        for child in self.children:
            if child is not None and child.poll() is None:
                child.send_signal(sig)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for i in range(self.n):
            self._start(i)
        statuses: list[int] = []
        while True:
            running = 0
            for i, child in enumerate(self.children):
                if child is None:
                    if not self.signals and time.monotonic() >= self.restart_at[i]:
                        self._start(i)
                        running += 1
                    continue
                status = child.poll()
                if status is None:
                    running += 1
                elif self.signals:
                    statuses.append(status)
                    self.children[i] = None
                else:
                    log.error("worker %d (pid %d) exited with status %d: starting it again",
                              i, child.pid, status)
                    self.children[i] = None
                    self.restart_at[i] = time.monotonic() + RESTART_DELAY
            if self.signals and not running:
                break
            time.sleep(POLL)
        if any(s == 130 for s in statuses):
            return 130
        return next((s for s in statuses if s), 0)
