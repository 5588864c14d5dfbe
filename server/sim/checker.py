"""The invariants of SPEC section 9, checked on what a workload saw
(server/sim/workload.py reports to the Checker as it goes): the history of
operations (adds answered, deliveries, acks, NACKs, ENQUEUEs sent, crashes,
damaged disks), a view of the cluster where a check needs one (a job's holders
when its ADDJOB is answered; the live nodes' jobs at the end), and the faults in
the simulation's trace (clock steps).

- an ADDJOB answered with an id has REPLICATE live copies;
- an ADDJOB sent again with its IDEMPOTENCY key to a node holding a copy of
  the job creates no second job;
- a held job is never delivered before an ENQUEUE released it;
- no job is delivered after its ack was collected;
- every acknowledged job that must survive its crashes is delivered, and
  every acked job is eventually gone from every node;
- once no message carrying them is on its way, every holder shows the same
  counters (runs without message loss);
- a RETRY 0 job is never delivered twice;
- a node never confirms a copy (GOTJOB) it has not logged: ``unlogged_copies``,
  run by the simulator's broker nodes (server/sim/broker_node.py) on every
  message they send.

A violation names the seed and the virtual time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.directives import AppendFsync
from broker.job import ACKED, FLAG_DUMMY_ACK, HELD
from protocol import bus as B


@dataclass
class Report:
    seed: int
    violations: list = field(default_factory=list)
    produced: int = 0              # ADDJOBs acknowledged to the producer
    key_retries: int = 0           # ADDJOBs sent again with the first one's IDEMPOTENCY key
    deliveries: int = 0
    distinct_delivered: int = 0
    at_least_once_redeliveries: int = 0
    duplicates: int = 0            # redeliveries not asked for (no NACK, no RETRY timeout)
    moved_redeliveries: int = 0    # redelivered by another node than the previous delivery
    sim_time: int = 0
    persistence: str = "off"       # appendfsync policy of the run, or "off"
    held: int = 0                  # jobs added with HOLD (acknowledged)
    released: int = 0              # ...whose ENQUEUE answered 1
    rereleased: int = 0            # ENQUEUEs sent again, after the heal, for copies still held


class Checker:
    """The history of one run and the checks on it. ``fsync``: the run's
    appendfsync (None: no AOF); ``clocks``: clock faults run; ``trace``: the
    simulation's (read for clock steps)."""

    def __init__(self, seed: int, fsync: AppendFsync | None, clocks: bool, names: list,
                 trace: list) -> None:
        self.seed = seed
        self.fsync = fsync
        self.clocks = clocks
        self.trace = trace
        self.violations: list = []
        self.crashed_at: dict[str, list] = {name: [] for name in names}
        self.damaged_at: dict[str, list] = {name: [] for name in names}
        self.produced: dict[bytes, dict] = {}    # jid -> {time, repl, retry, holders, async...}
        self.deliveries: list = []               # (jid, time, host)
        self.acked: set[bytes] = set()
        self.acked_at: dict[bytes, int] = {}     # first ACKJOB/FASTACK sent by a consumer
        self.nacked_at: dict[bytes, list] = {}
        self.collected_at: dict[bytes, int] = {}
        # Held jobs: body -> when the first ENQUEUE for it was sent (None: not yet).
        self.held_bodies: dict[bytes, int | None] = {}

    def violation(self, now: int, text: str) -> None:
        self.violations.append(f"seed={self.seed} t={now}: {text}")

    # -- the history -----------------------------------------------------------------
    def crashed(self, name: str, now: int) -> None:
        """``name`` went down (its process killed, or exited on a failed write)."""
        self.crashed_at[name].append(now)

    def disk_damaged(self, name: str, now: int) -> None:
        """``name``'s AOF was damaged while it was down (cut, bit flipped...)."""
        self.damaged_at[name].append(now)

    def add_answered(self, jid: bytes, now: int, start: int, add: dict, holders: list) -> None:
        """An ADDJOB sent at ``start`` answered ``jid``; ``holders``: the live
        nodes holding a copy now; ``add``: repl, retry, async, ttl, held, body, key."""
        crashed_meanwhile = any(t >= start for ts in self.crashed_at.values() for t in ts)
        # A replica may requeue, deliver and collect the job before the
        # producer hears back (replication slower than RETRY): no copy check.
        consumed = any(d[0] == jid for d in self.deliveries)
        if (not add["async"] and len(holders) < add["repl"]
                and not (crashed_meanwhile or consumed or self.stepped_forward(start))):
            self.violation(now, f"ADDJOB {jid!r} answered with {len(holders)} live copies "
                                f"< REPLICATE {add['repl']}")
        self.produced[jid] = {"time": now, "holders": holders, **add}

    def key_retry_answered(self, jid: bytes, now: int, name: str, key: bytes, held: list,
                           known: set, add: dict, holders: list) -> None:
        """(ext) An ADDJOB sent again with its IDEMPOTENCY key to ``name``
        answered ``jid``; ``held``: the ids of the jobs with that key ``name``
        held when it was sent, ``known``: every id the cluster knew for the key
        then. A node that holds a copy of a job added with that key (waiting
        for its copies, live or acked) creates no second job: it answers an id
        the cluster already knew (or the first add's error)."""
        if held and jid not in known:
            self.violation(now, f"ADDJOB retried with key {key!r} on {name}, which held "
                                f"{held}, created a second job {jid!r}")
        if jid not in self.produced:
            # A job this retry created has its REPLICATE copies; one it was
            # answered (a node holding, or having held, one copy of it) has
            # that copy for the producer to count on.
            if jid in known:
                add = dict(add, repl=1)
            self.produced[jid] = {"time": now, "holders": holders, **add}

    def held_added(self, body: bytes) -> None:
        self.held_bodies[body] = None

    def enqueue_sent(self, body: bytes, now: int) -> None:
        """An ENQUEUE releasing the held job ``body`` was sent."""
        if self.held_bodies.get(body) is None:
            self.held_bodies[body] = now

    def delivered(self, jid: bytes, body: bytes, name: str, now: int) -> None:
        # A host that crashed holds what its disk kept, even while it is down.
        crashed = any(c <= now for cs in self.crashed_at.values() for c in cs)
        if jid in self.collected_at and not (self.fsync is not None and crashed):
            # (With an AOF a node that was down when the job was collected, or
            # missed a best-effort DELJOB, comes back with it; under everysec a
            # crash may also lose the last second of records, the ack among
            # them: the job comes back, at least once.)
            self.violation(now, f"{jid!r} delivered on {name} at {now} after its ack was "
                                f"collected at {self.collected_at[jid]}")
        self.deliveries.append((jid, now, name))
        if body in self.held_bodies and self.held_bodies[body] is None:
            self.violation(now, f"held job {jid!r} delivered on {name} before any "
                                f"ENQUEUE released it")

    def ack_sent(self, jid: bytes, now: int) -> None:
        self.acked_at.setdefault(jid, now)

    def ack_answered(self, jid: bytes) -> None:
        """An ACKJOB or FASTACK for ``jid`` was answered."""
        self.acked.add(jid)

    def nack_sent(self, jid: bytes, now: int) -> None:
        self.nacked_at.setdefault(jid, []).append(now)

    def observe(self, holders, now: int) -> None:
        """Note when an acked job disappeared from every live node
        (``holders(jid)``: the live nodes holding a copy)."""
        for jid in self.acked:
            if jid not in self.collected_at and not holders(jid):
                self.collected_at[jid] = now

    # -- excuses -----------------------------------------------------------------------
    def stepped_forward(self, since: int) -> bool:
        """Some host's clock stepped forward since then: its node may have
        expired copies early (it cannot tell a jump from a stall)."""
        return self.clocks and any(e[1] == "clock" and e[3] > 0 and e[0] >= since
                                   for e in self.trace)

    def reloaded(self, jid: bytes, name: str) -> bool:
        """Loaded from the AOF after a crash of `name`: a RETRY 0 job comes back
        active and is never queued again by a load (SPEC section 7): it waits
        for its TTL."""
        p = self.produced.get(jid)
        return (self.fsync is not None and p is not None
                and any(c >= p["time"] for c in self.crashed_at[name]))

    def ack_lost(self, jid: bytes, name: str) -> bool:
        """Under everysec a crash of `name` after the ack may have lost it; a
        disk damaged after it may have cut the ack's record (the job then comes
        back active on that host, never queued again by a load: it waits for
        its TTL)."""
        t = self.acked_at.get(jid)
        if t is None:
            return False
        return ((self.fsync is AppendFsync.EVERYSEC
                 and any(c >= t for c in self.crashed_at[name]))
                or any(t <= d for d in self.damaged_at[name]))

    def must_survive(self, jid: bytes, p: dict) -> bool:
        """SPEC 9.1: acknowledged (sync) and fewer than REPLICATE holders lost.
        At-most-once (RETRY 0) jobs are exempt: one moved by federation is lost
        with the YOURJOBS message if that is lost, as in Disque. Under
        appendfsync always a crash loses no holder: every acknowledged job
        survives any crash."""
        if p["async"] or p["retry"] == 0 or p["ttl"] < 60:
            return False                # (a short TTL may expire first, as it should)
        if self.fsync is AppendFsync.ALWAYS:
            return True
        lost = sum(1 for h in p["holders"] if any(t >= p["time"] for t in self.crashed_at[h]))
        return lost < p["repl"]

    def unasked(self, jid: bytes, prev: int, t: int) -> bool:
        """A redelivery nobody asked for: after the consumer acked it, or sooner
        than RETRY after the previous delivery with no NACK in between."""
        if self.acked_at.get(jid, t) < t:
            return True
        if any(prev <= n <= t for n in self.nacked_at.get(jid, ())):
            return False
        p = self.produced.get(jid)
        retry_ms = (p["retry"] if p else 1) * 1000
        return t - prev < retry_ms - 300

    # -- the end state -----------------------------------------------------------------
    def undelivered(self) -> list:
        """Acknowledged jobs that must survive and were never delivered."""
        delivered = {d[0] for d in self.deliveries}
        return [j for j, p in self.produced.items()
                if j not in delivered and self.must_survive(j, p)]

    def leftovers(self, live: list) -> dict:
        """Jobs still held (``live``: (name, Node) of the live hosts) that should
        be gone: everything but at-most-once jobs delivered and never acked (they
        wait for their TTL, as specified), and held jobs whose producer never
        learnt the id (a lost ADDJOB reply, a -NOREPL whose DELJOB was lost):
        nobody releases them, their TTL ends them."""
        left = {}
        for name, node in live:
            if node.job_count:
                jobs = [j.id for j in node.iter_jobs()
                        if not (j.retry == 0 and j.state != ACKED
                                and (j.id not in self.acked or self.ack_lost(j.id, name))
                                and (any(d[0] == j.id for d in self.deliveries)
                                     or self.reloaded(j.id, name)))
                        and not (j.state == HELD and j.id not in self.produced)]
                if jobs:
                    left[name] = jobs
        return left

    def settled(self, live: list) -> bool:
        """Nothing left to deliver or collect."""
        return not self.undelivered() and not self.leftovers(live)

    def check_end(self, live: list, now: int) -> None:
        lost = self.undelivered()
        if lost:
            self.violation(now, f"acknowledged jobs never delivered: {lost}")
        left = self.leftovers(live)
        if left:
            self.violation(now, f"jobs still held after heal (acks not collected): {left}")

    def check_counters(self, live: list, now: int) -> None:
        """Counters are a property of the job (issue 16): once no message that
        carries them is on its way, every holder shows the same nacks and
        additional-deliveries, whichever of them re-queued it (checked on runs
        without message loss: a lost QUEUED is only made good by the next one)."""
        copies: dict[bytes, list] = {}
        for name, node in live:
            for j in node.iter_jobs():
                if j.state != ACKED and not j.flags & FLAG_DUMMY_ACK:
                    copies.setdefault(j.id, []).append((name, j.nacks, j.additional_deliveries))
        for jid, held in copies.items():
            if len({c[1:] for c in held}) > 1:
                self.violation(now, f"holders disagree on the counters of {jid!r} once quiet: "
                                    f"{held} (name, nacks, additional-deliveries)")

    def report(self, now: int, **counts) -> Report:
        """The run's Report (``counts``: the workload's own), after the last
        check: no RETRY 0 job delivered twice."""
        r = Report(self.seed, self.violations, produced=len(self.produced),
                   deliveries=len(self.deliveries), sim_time=now,
                   persistence=str(self.fsync) if self.fsync is not None else "off",
                   held=sum(1 for p in self.produced.values() if p["held"]), **counts)
        seen: dict[bytes, int] = {}
        last: dict[bytes, int] = {}
        where: dict[bytes, str] = {}
        for jid, t, h in self.deliveries:
            seen[jid] = seen.get(jid, 0) + 1
            if jid in last and self.unasked(jid, last[jid], t):
                r.duplicates += 1
            if jid in where and where[jid] != h:
                r.moved_redeliveries += 1
            last[jid] = t
            where[jid] = h
        r.distinct_delivered = len(seen)
        for jid, count in seen.items():
            p = self.produced.get(jid)
            retry = p["retry"] if p else None
            if retry == 0 and count > 1:
                self.violation(now, f"RETRY 0 job {jid!r} delivered {count} times")
            elif count > 1:
                r.at_least_once_redeliveries += count - 1
        return r


def unlogged_copies(msg, node, now: int, logged) -> list:
    """The job ids whose copy ``msg`` (a GOTJOB, alone or in a BATCH) confirms
    from ``node`` without ``logged(jid)``."""
    if msg.type == B.GOTJOB:
        ids = [msg.payload]
    elif msg.type == B.BATCH:
        p = msg.payload
        ids = [p[i + 1] for i in range(0, len(p), 2) if p[i] == B.GOTJOB]
    else:
        return []
    out = []
    for jid in ids:
        job = node.get_job(jid)
        if job is not None and job.state == ACKED:
            continue        # confirms an ack (a dummy one is never logged), not a copy
        if job is not None and job.etime <= now:
            continue        # expired: an AOF rewrite drops it, as a load would
        if not logged(jid):
            out.append(jid)
    return out
