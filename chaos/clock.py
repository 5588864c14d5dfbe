"""Clock faults (issue 25): nodes run under Debian's libfaketime, each with a
control file that sets its clock's offset from true time, changed while it runs.

libfaketime (``LD_PRELOAD``) fakes every clock the node reads: the wall clock
and the monotonic clocks alike (``time.time``, ``time.monotonic``, the event
loop's), by the same offset, so a jump is seen on both, as a node cannot tell
a jump from a stall. ``FAKETIME_NO_CACHE`` makes it read the file at every
call, so a new offset applies at once (at some cost per call: fine for a chaos
run). Only nodes run under it: the workload, the prober and the checker keep
true time.

- :func:`libfaketime` finds the preload library at run time (the package's
  files, as ``dpkg-query -L libfaketime`` lists them; ``DISQUETTE_LIBFAKETIME``
  overrides), never from a path written here.
- :class:`FakeClock` is one node's control file: its offset, set and read back.
- :class:`TtlProbe` checks, from outside, that no job expires before its TTL by
  true time: it adds jobs with short TTLs to a queue nobody consumes, then
  asks every node, again and again, whether it still holds them; a job no node
  holds before its TTL is over expired early (chaos/checker.py).
"""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import redis

from chaos.history import HistoryWriter

LIBFAKETIME_ENV = "DISQUETTE_LIBFAKETIME"
PROBE_QUEUE = "chaos-ttl-probe"


class FaketimeMissing(RuntimeError):
    """libfaketime is not installed (Debian: apt-get install faketime libfaketime)."""


def libfaketime() -> str:
    """The path of libfaketime's multithreaded preload library."""
    override = os.environ.get(LIBFAKETIME_ENV)
    if override:
        return override
    try:
        listed = subprocess.run(["dpkg-query", "-L", "libfaketime"], capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    # The multithreaded build: the node has threads (the resolver, the AOF).
    for name in ("libfaketimeMT.so.1", "libfaketime.so.1"):
        for path in listed:
            if path.endswith(f"/faketime/{name}") and os.path.exists(path):
                return path
    raise FaketimeMissing("libfaketime not found: install Debian's faketime and libfaketime "
                          f"packages, or set {LIBFAKETIME_ENV}")


class FakeClock:
    """One node's clock offset, in seconds, through its libfaketime control file."""

    def __init__(self, path: Path, offset: float = 0.0) -> None:
        self.path = path
        self.offset = 0.0
        self.set(offset)

    def env(self) -> dict[str, str]:
        """What the node's process needs in its environment."""
        return {"LD_PRELOAD": libfaketime(), "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_NO_CACHE": "1"}

    def set(self, offset: float) -> None:
        # Written whole then renamed: libfaketime never reads half an offset.
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(f"{offset:+.3f}s\n")
        os.replace(tmp, self.path)
        self.offset = offset


class Strobe:
    """A clock flipping between two offsets every ``period`` seconds, in a
    thread, until stopped (then back at ``base``)."""

    def __init__(self, clock: FakeClock, base: float, other: float, period: float,
                 on_step: Callable[[float, float], None]) -> None:
        self.clock, self.base, self.other, self.period = clock, base, other, period
        self.on_step = on_step
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="clock-strobe", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        at_other = False
        while not self.stopped.wait(self.period):
            at_other = not at_other
            self.on_step(self.clock.offset, self.other if at_other else self.base)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        if self.clock.offset != self.base:
            self.on_step(self.clock.offset, self.base)


# ------------------------------------------------------------------- TTL probes
class TtlProbe:
    """Adds a job with a short TTL every ``every`` seconds (queue
    ``chaos-ttl-probe``, never consumed) and polls every node for the jobs whose
    TTL is not over, recording in the history:

    - ``probe`` phase add: id, node, ttl, replicate, retry, t (the add's
      invocation: no node can have started the TTL earlier);
    - ``probe`` phase held: id, holders (the nodes holding it, every node
      having answered), whenever they change;
    - ``probe`` phase gone: id, t0 (the poll's start); every node answered
      that it holds no copy by ``t``.
    """

    def __init__(self, nodes: list[Any], history: HistoryWriter, seed: int,
                 ttl: tuple[int, int] = (2, 6), every: float = 0.5,
                 replicate: tuple[int, ...] = (1, 2, 3)) -> None:
        self.nodes, self.history = nodes, history
        self.rng = random.Random(f"{seed}-ttl-probe")
        self.ttl, self.every = ttl, every
        self.replicate = [r for r in replicate if r <= len(nodes)] or [1]
        self.live: dict[str, float] = {}        # id -> monotonic time its TTL ends
        self.seen: dict[str, list[str]] = {}    # id -> holders at the last poll
        self.running = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.running.set()
        self.thread = threading.Thread(target=self._run, name="ttl-probe", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """No more adds; polls go on until every probe's TTL is over."""
        self.running.clear()
        if self.thread is not None:
            self.thread.join(max(self.ttl) + 15)

    def _run(self) -> None:
        next_add = time.monotonic()
        try:
            while self.running.is_set() or self.live:
                now = time.monotonic()
                if self.running.is_set() and now >= next_add:
                    self._add()
                    next_add = now + self.every
                self._poll()
                time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 - a prober bug must show in the report
            self.history.event("probe", phase="error", error=f"{type(exc).__name__}: {exc}")

    def _add(self) -> None:
        node = self.rng.choice(self.nodes)
        ttl = self.rng.randint(*self.ttl)
        replicate = self.rng.choice(self.replicate)
        retry = self.rng.choice([0, 1, 2]) if replicate == 1 else self.rng.choice([1, 2])
        t = time.monotonic()
        try:
            with redis.Redis("127.0.0.1", node.port, socket_timeout=2,
                             socket_connect_timeout=1) as r:
                jid = r.execute_command("ADDJOB", PROBE_QUEUE, "probe", 2000, "TTL", ttl,
                                        "REPLICATE", replicate, "RETRY", retry)
        except redis.RedisError:
            return              # not added (or unknown): nothing to check
        jid = jid.decode()
        self.live[jid] = t + ttl
        self.history.event("probe", phase="add", id=jid, node=node.name, ttl=ttl,
                           replicate=replicate, retry=retry,
                           t_invoke=round(t - self.history.t0, 6))

    def _poll(self) -> None:
        now = time.monotonic()
        for jid in [j for j, end in self.live.items() if end <= now]:
            del self.live[jid]
            self.seen.pop(jid, None)
        if not self.live:
            return
        ids = list(self.live)
        t0 = round(time.monotonic() - self.history.t0, 6)
        held: dict[str, list[str]] = {jid: [] for jid in ids}
        complete = True
        for node in self.nodes:
            try:
                with redis.Redis("127.0.0.1", node.port, socket_timeout=1,
                                 socket_connect_timeout=0.5) as r:
                    pipe = r.pipeline(transaction=False)
                    for jid in ids:
                        pipe.execute_command("SHOW", jid)
                    shown = pipe.execute(raise_on_error=False)
            except redis.RedisError:
                complete = False
                continue
            for jid, reply in zip(ids, shown):
                if isinstance(reply, Exception):
                    complete = False
                elif reply:
                    held[jid].append(node.name)
        if not complete:
            return              # a node did not answer: this poll tells nothing
        for jid in ids:
            holders = held[jid]
            if not holders:
                self.history.event("probe", phase="gone", id=jid, t0=t0)
                del self.live[jid]
                self.seen.pop(jid, None)
            elif self.seen.get(jid) != holders:
                self.seen[jid] = holders
                self.history.event("probe", phase="held", id=jid, holders=holders)
