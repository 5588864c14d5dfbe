"""The verdict over a history: Jepsen's total-queue checker, plus what a
Disque-style broker promises beyond it (SPEC section 9).

Jepsen's figures (``jepsen.checker/total-queue``), keyed by the job's value
(its body, unique in a run, so an add whose reply was lost can still be
recognised when delivered):

- attempted: adds invoked; acknowledged: adds answered with an id;
- lost: acknowledged, never delivered (not in the run, not in the drain); a
  RETRY 0 job is at most once and may be lost when its only copy is (a node
  crash, a YOURJOBS lost on the wire: SPEC §8), so it counts apart, as
  retry0_undelivered, and does not fail the run;
- unexpected: delivered, never added;
- duplicated: delivered more than once (at-least-once allows it; the rate is
  duplicated / distinct values delivered);
- recovered: an add of unknown outcome (timeout, connection lost) later delivered.

Ours:

- retry0_redelivered: a RETRY 0 job (at most once) delivered more than once;
- uncollected: an acked job still held by a node after healing (ack GC);
- duplicates split by cause: after a NACK (asked for), after an ACK (the ack
  did not reach every holder in time), or after the retry timer;
- failed_then_delivered: an add answered with an error yet delivered (Disque's
  NOREPL deletes copies best-effort only);
- lost_where: for each lost job, the damaged disks that cut its records (disk
  faults' ``discarded`` events), and lost_every_copy_cut: those cut on as many
  damaged disks as their REPLICATE level (still lost: a copy may have had
  time to be delivered between two damages);
- latency percentiles: adds (invoke -> reply) and deliveries (add invoked ->
  first delivery);
- unavailability: the longest stretch, while producers ran, with no add
  acknowledged and with no job delivered; recovery: from the heal (the last
  fault stopped) until an add invoked after it is acknowledged and a job is
  delivered;
- power_loss: per ``power-loss`` fault (chaos/disk.py), the acknowledged adds
  lost with it (acked before the power came back, never delivered) and the
  loss window (the longest time between such an add's acknowledgement and the
  cut); a loss within what the fault says its fsync policy tolerates
  (``tolerates_s``: 0 nothing, None no bound) does not count as lost.

The run fails (``valid`` False, non-zero exit) on anything lost, anything
unexpected, a RETRY 0 job delivered twice, or a workload thread that failed
(an ``error`` event: the history is incomplete).

Pure: a list of events in, a ``CheckResult`` out; no files, no clock.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from chaos.history import FAIL, INFO, INVOKE, OK, History

PERCENTILES = (50, 90, 99)
EXAMPLES = 20          # how many values/ids each list keeps for the report


def percentiles(samples: Iterable[float]) -> dict[str, float | int | None]:
    """count, p50/p90/p99 (nearest rank), max, in the samples' unit."""
    values = sorted(samples)
    out: dict[str, float | int | None] = {"count": len(values)}
    for p in PERCENTILES:
        out[f"p{p}"] = values[max(math.ceil(p / 100 * len(values)) - 1, 0)] if values else None
    out["max"] = values[-1] if values else None
    return out


@dataclass
class Add:
    op: int
    value: str
    t: float
    node: str | None = None
    queue: str | None = None
    retry: float | None = None
    replicate: int | None = None
    outcome: str = INFO             # ok / fail / info (unknown: no reply by the end)
    id: str | None = None
    t_reply: float | None = None
    error: str | None = None


@dataclass
class Delivery:
    t: float
    id: str | None
    value: str | None
    node: str | None
    drain: bool


@dataclass
class CheckResult:
    valid: bool
    problems: list[str]
    attempted: int
    acknowledged: int
    failed: int
    indeterminate: int
    deliveries: int
    delivered: int                      # distinct values
    lost: int
    unexpected: int
    duplicated: int
    duplicate_rate: float
    duplicates_after_nack: int          # redeliveries
    duplicates_after_ack: int
    duplicates_after_timeout: int
    recovered: int
    failed_then_delivered: int
    retry0_jobs: int
    retry0_redelivered: int
    retry0_undelivered: int             # acknowledged RETRY 0 adds never delivered (allowed)
    acked_jobs: int
    uncollected: int                    # (node, acked job) pairs still held after healing
    uncollected_by_node: dict[str, int]
    leftover_unacked: int
    id_mismatches: int                  # value delivered under another id than its add's
    drain_complete: bool | None
    history_complete: bool
    add_latency: dict[str, Any]
    delivery_latency: dict[str, Any]
    examples: dict[str, list] = field(default_factory=dict)
    # the longest stretches of the production period with no acknowledged add
    # and with no delivery, and how long after the heal each served again
    unavailable_add: dict[str, float] | None = None
    unavailable_delivery: dict[str, float] | None = None
    recovery: dict[str, float | None] | None = None
    power_loss: list[dict[str, Any]] = field(default_factory=list)
    # Clock faults (issue 25; chaos/clock.py): TTL probes, the early expiries
    # among them (and those a node whose clock stepped forward may cause), and
    # requeue storms.
    ttl_probes: int = 0
    expired_early: int = 0
    expired_early_allowed: int = 0
    copies_expired_early: int = 0
    requeue_storms: int = 0
    max_deliveries_per_job_s: int = 0
    # Disk faults (chaos/disk.py): the lost jobs with a record cut on as many
    # damaged disks as their REPLICATE level (examples: lost_where)
    lost_every_copy_cut: int = 0
    # A rolling upgrade (chaos/upgrade.py): the adds acknowledged while nodes
    # of both releases ran (all of them up), the REPLICATE 3 probes, those
    # short of a copy (3 when added, 2 running while the next node was down),
    # those held by nodes of both releases, those never acked, and the bus
    # messages dropped as malformed
    mixed_phase_adds: int = 0
    upgrade_probes: int = 0
    upgrade_probes_short: int = 0
    upgrade_probes_across: int = 0
    upgrade_probes_unacked: int = 0
    upgrade_malformed: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _adds(events: list[dict[str, Any]]) -> dict[int, Add]:
    adds: dict[int, Add] = {}
    for e in events:
        if e["type"] != "add":
            continue
        if e.get("phase") == INVOKE:
            adds[e["op"]] = Add(op=e["op"], value=e["value"], t=e["t"], node=e.get("node"),
                                queue=e.get("queue"), retry=e.get("retry"),
                                replicate=e.get("replicate"))
        elif e.get("op") in adds and e.get("phase") in (OK, FAIL, INFO):
            add = adds[e["op"]]
            add.outcome, add.t_reply = e["phase"], e["t"]
            add.id, add.error = e.get("id"), e.get("error")
    return adds


def check(history: History | list[dict[str, Any]]) -> CheckResult:
    events = history.events if isinstance(history, History) else history
    adds = _adds(events)
    by_value = {add.value: add for add in adds.values()}
    by_id = {add.id: add for add in adds.values() if add.id}

    deliveries = [Delivery(e["t"], e.get("id"), e.get("value"), e.get("node"),
                           bool(e.get("drain")))
                  for e in events if e["type"] == "deliver"]
    delivered_of: dict[str, list[Delivery]] = defaultdict(list)
    unexpected: list[str] = []
    id_mismatches: list[str] = []
    for d in deliveries:
        add = by_value.get(d.value) if d.value is not None else by_id.get(d.id)
        if add is None:
            unexpected.append(d.value if d.value is not None else f"id {d.id}")
            continue
        if add.id and d.id and add.id != d.id:
            id_mismatches.append(d.id)
        delivered_of[add.value].append(d)

    acked_at: dict[str, list[float]] = defaultdict(list)
    nacked_at: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["type"] in ("ack", "nack") and not e.get("error"):
            (acked_at if e["type"] == "ack" else nacked_at)[e["id"]].append(e["t"])

    ok_adds = [a for a in adds.values() if a.outcome == OK]
    never = [a for a in ok_adds if a.value not in delivered_of]
    power, excused = power_losses(events, [a for a in never if a.retry != 0], ok_adds)
    lost = [a.value for a in never if a.retry != 0 and a.value not in excused]
    retry0_undelivered = [a.value for a in never if a.retry == 0]
    recovered = [a.value for a in adds.values() if a.outcome == INFO and a.value in delivered_of]
    failed_delivered = [a.value for a in adds.values()
                        if a.outcome == FAIL and a.value in delivered_of]

    duplicated = [v for v, ds in delivered_of.items() if len(ds) > 1]
    causes: Counter[str] = Counter()
    for value in duplicated:
        ds = delivered_of[value]
        ids = {d.id for d in ds} | {by_value[value].id}
        nacks = sorted(t for i in ids if i for t in nacked_at.get(i, ()))
        acks = sorted(t for i in ids if i for t in acked_at.get(i, ()))
        for prev, this in zip(ds, ds[1:]):
            if any(prev.t <= t <= this.t for t in nacks):
                causes["nack"] += 1
            elif any(t <= this.t for t in acks):
                causes["ack"] += 1
            else:
                causes["timeout"] += 1

    retry0 = [a for a in adds.values() if a.retry == 0]
    retry0_twice = [a.value for a in retry0 if len(delivered_of.get(a.value, ())) > 1]

    acked_ids = set(acked_at)
    uncollected_by_node: dict[str, list[str]] = {}
    leftover_unacked: list[str] = []
    for e in events:
        if e["type"] != "leftover":
            continue
        jobs = e.get("jobs") or {}
        held = [i for i in jobs if i in acked_ids]
        if held:
            uncollected_by_node.setdefault(e["node"], []).extend(held)
        leftover_unacked.extend(i for i in jobs if i not in acked_ids)

    drain_ends = [e for e in events if e["type"] == "drain" and e.get("phase") == "end"]
    drain_complete = bool(drain_ends[-1].get("complete")) if drain_ends else None

    # Times are written to the microsecond; so are the latencies.
    add_latency = percentiles(round(a.t_reply - a.t, 6) for a in ok_adds)
    delivery_latency = percentiles(round(delivered_of[a.value][0].t - a.t, 6)
                                   for a in adds.values() if a.value in delivered_of)

    cut = cut_copies(events)
    lost_where = [f"{v}: REPLICATE {by_value[v].replicate}, records cut on "
                  f"{', '.join(cut.get(by_value[v].id or '', ())) or 'no damaged disk'}"
                  for v in lost]
    every_copy_cut = [v for v in lost
                      if len(cut.get(by_value[v].id or "", ())) >= (by_value[v].replicate or 1)]

    problems = []
    if lost:
        problems.append(f"{len(lost)} acknowledged add(s) never delivered (lost)"
                        + (f", {len(every_copy_cut)} of them with a record cut on as many "
                           f"damaged disks as their REPLICATE level (see lost_where)"
                           if every_copy_cut else ""))
    if unexpected:
        problems.append(f"{len(unexpected)} delivery(ies) of jobs never added (unexpected)")
    if retry0_twice:
        problems.append(f"{len(retry0_twice)} RETRY 0 job(s) delivered more than once")
    failed_threads = sum(e["type"] == "error" for e in events)
    if failed_threads:
        # a producer or consumer that died leaves the history incomplete
        problems.append(f"{failed_threads} workload thread(s) failed: the run proves nothing")
    probes, early, allowed, copies_early, probe_errors = ttl_probes(events)
    if early:
        problems.append(f"{len(early)} job(s) expired before their TTL (by true time)")
    if copies_early:
        problems.append(f"{len(copies_early)} cop(ies) expired before their TTL on a node "
                        "whose clock never stepped forward")
    if probe_errors:
        problems.append(f"the TTL prober failed: {probe_errors[0]}")
    storms, busiest = requeue_storms(delivered_of, nacked_at)
    if storms:
        problems.append(f"{len(storms)} job(s) delivered more than {STORM_DELIVERIES} times "
                        f"within {STORM_WINDOW_S:g} s with no NACK (requeue storm)")
    upgrade = upgrade_figures(events, ok_adds)
    if upgrade["upgrade_probes_short"]:
        problems.append(f"{upgrade['upgrade_probes_short']} upgrade probe(s) short of a copy "
                        "(3 when added, 2 running while a node was down)")
    if upgrade["upgrade_probes"] and not upgrade["upgrade_probes_across"]:
        problems.append("no upgrade probe was held by nodes of both releases")
    if upgrade["upgrade_probes_unacked"]:
        problems.append(f"{upgrade['upgrade_probes_unacked']} upgrade probe(s) never "
                        "delivered and acked")
    if upgrade["upgrade_malformed"]:
        problems.append(f"{upgrade['upgrade_malformed']} bus message(s) dropped as malformed "
                        "during the upgrade (INFO malformed_bus_messages)")
    if upgrade["mixed_phases"] and not upgrade["mixed_phase_adds"]:
        problems.append("no add acknowledged while nodes of both releases ran")
    distinct = len(delivered_of)
    uncollected = sum(len(v) for v in uncollected_by_node.values())
    return CheckResult(
        valid=not problems,
        problems=problems,
        power_loss=power,
        attempted=len(adds),
        acknowledged=len(ok_adds),
        failed=sum(a.outcome == FAIL for a in adds.values()),
        indeterminate=sum(a.outcome == INFO for a in adds.values()),
        deliveries=len(deliveries),
        delivered=distinct,
        lost=len(lost),
        unexpected=len(unexpected),
        duplicated=len(duplicated),
        duplicate_rate=round(len(duplicated) / distinct, 6) if distinct else 0.0,
        duplicates_after_nack=causes["nack"],
        duplicates_after_ack=causes["ack"],
        duplicates_after_timeout=causes["timeout"],
        recovered=len(recovered),
        failed_then_delivered=len(failed_delivered),
        retry0_jobs=len(retry0),
        retry0_redelivered=len(retry0_twice),
        retry0_undelivered=len(retry0_undelivered),
        acked_jobs=len(acked_ids),
        uncollected=uncollected,
        uncollected_by_node={n: len(v) for n, v in sorted(uncollected_by_node.items())},
        leftover_unacked=len(leftover_unacked),
        id_mismatches=len(id_mismatches),
        drain_complete=drain_complete,
        history_complete=any(e["type"] == "end" for e in events),
        add_latency=add_latency,
        delivery_latency=delivery_latency,
        examples={name: values[:EXAMPLES] for name, values in (
            ("lost", lost), ("lost_where", lost_where), ("unexpected", unexpected),
            ("duplicated", duplicated),
            ("recovered", recovered), ("retry0_redelivered", retry0_twice),
            ("retry0_undelivered", retry0_undelivered),
            ("uncollected", sorted({i for v in uncollected_by_node.values() for i in v})),
            ("id_mismatches", id_mismatches), ("expired_early", early),
            ("copies_expired_early", copies_early),
            ("requeue_storms", storms)) if values},
        ttl_probes=probes,
        expired_early=len(early),
        expired_early_allowed=len(allowed),
        copies_expired_early=len(copies_early),
        requeue_storms=len(storms),
        max_deliveries_per_job_s=busiest,
        lost_every_copy_cut=len(every_copy_cut),
        mixed_phase_adds=upgrade["mixed_phase_adds"],
        upgrade_probes=upgrade["upgrade_probes"],
        upgrade_probes_short=upgrade["upgrade_probes_short"],
        upgrade_probes_across=upgrade["upgrade_probes_across"],
        upgrade_probes_unacked=upgrade["upgrade_probes_unacked"],
        upgrade_malformed=upgrade["upgrade_malformed"],
        **windows(events),
    )


def cut_copies(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Job id -> where a damaged disk lost its record ("n3 at 85.6 s"), from
    the ``discarded`` disk events (chaos/disk.py): for a lost job, whether
    every copy went with a disk, or one survived and was not delivered."""
    out: dict[str, list[str]] = defaultdict(list)
    for e in events:
        if e["type"] == "disk" and e.get("what") == "discarded":
            for jid in e.get("jobs") or ():
                out[jid].append(f"{e['node']} at {e['t']:.1f} s")
    return out


# -- unavailability and recovery ---------------------------------------------------

def longest_gap(times: Iterable[float], start: float, end: float) -> dict[str, float] | None:
    """The longest stretch of ``[start, end]`` with none of ``times`` in it,
    as ``{"seconds", "from", "to"}``; None for an empty period."""
    if end <= start:
        return None
    prev, best = start, (0.0, start, start)
    for t in sorted(times):
        if t < start:
            continue
        if t > end:
            break
        if t - prev > best[0]:
            best = (t - prev, prev, t)
        prev = t
    if end - prev > best[0]:
        best = (end - prev, prev, end)
    return {"seconds": round(best[0], 6), "from": round(best[1], 6), "to": round(best[2], 6)}


def production_period(events: list[dict[str, Any]]) -> tuple[float, float] | None:
    """From the first add invoked to the last: while producers ran."""
    invoked = [e["t"] for e in events if e["type"] == "add" and e.get("phase") == INVOKE]
    return (min(invoked), max(invoked)) if invoked else None


def healed_at(events: list[dict[str, Any]]) -> float | None:
    """When the last fault stopped (the heal stops those still on), or the
    heal itself when no fault was recorded; None before any heal."""
    stops = [e["t"] for e in events if e["type"] == "fault" and e.get("phase") == "stop"]
    heals = [e["t"] for e in events if e["type"] == "heal"]
    if stops:
        return max(stops)
    return heals[-1] if heals else None


def recovery(events: list[dict[str, Any]]) -> dict[str, float | None] | None:
    """Seconds from the heal until an add invoked after it is acknowledged
    (``add``), until a job is delivered (``delivery``), and until both
    (``both``); None for what never came back."""
    healed = healed_at(events)
    if healed is None:
        return None
    invoked: dict[int, float] = {}
    add = delivery = None
    for e in events:
        if e["t"] < healed:
            if e["type"] == "add" and e.get("phase") == INVOKE:
                invoked[e["op"]] = e["t"]        # before the heal: does not count
            continue
        if e["type"] == "add" and e.get("phase") == OK and add is None \
                and e["op"] not in invoked:
            add = round(e["t"] - healed, 6)
        elif e["type"] == "deliver" and delivery is None:
            delivery = round(e["t"] - healed, 6)
    both = max(add, delivery) if add is not None and delivery is not None else None
    return {"healed_at": healed, "add": add, "delivery": delivery, "both": both}


def windows(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The CheckResult fields of this section, from a history's events."""
    period = production_period(events)
    if period is None:
        return {"unavailable_add": None, "unavailable_delivery": None,
                "recovery": recovery(events)}
    oks = (e["t"] for e in events if e["type"] == "add" and e.get("phase") == OK)
    deliveries = (e["t"] for e in events if e["type"] == "deliver")
    return {"unavailable_add": longest_gap(oks, *period),
            "unavailable_delivery": longest_gap(deliveries, *period),
            "recovery": recovery(events)}
def power_losses(events: list[dict[str, Any]], never: list[Add],
                 ok_adds: list[Add]) -> tuple[list[dict[str, Any]], set[str]]:
    """Per power-loss fault: how many acknowledged adds it cost and over what
    window; and the values of those within the fault's promise (excused)."""
    cuts = [e for e in events if e["type"] == "fault" and e.get("phase") == "start"
            and e.get("name") == "power-loss"]
    stops = {e["fault"]: e["t"] for e in events
             if e["type"] == "fault" and e.get("phase") == "stop"}
    figures: list[dict[str, Any]] = []
    excused: set[str] = set()
    taken: set[str] = set()
    for cut in cuts:
        t, back = cut["t"], stops.get(cut["fault"], math.inf)
        detail = cut.get("detail") or {}
        tolerates = detail.get("tolerates_s")
        # acked before the power came back (a reply may be read after the cut)
        lost = [a for a in never if a.value not in taken and a.t_reply is not None
                and a.t_reply <= back]
        windows = [max(t - a.t_reply, 0.0) for a in lost]
        for a, w in zip(lost, windows):
            taken.add(a.value)
            if tolerates is None or (tolerates > 0 and w <= tolerates):
                excused.add(a.value)
        figures.append({
            "policy": detail.get("policy"), "t": t, "tolerates_s": tolerates,
            "acked_before": sum(1 for a in ok_adds if a.t_reply is not None and a.t_reply <= t),
            "lost": len(lost), "window_s": round(max(windows, default=0.0), 6),
            "excused": sum(1 for a in lost if a.value in excused),
        })
    return figures, excused


# ------------------------------------------------------- clock faults (issue 25)
STORM_WINDOW_S = 1.0
# More deliveries of one job than this within STORM_WINDOW_S, with no NACK
# between them, is a requeue storm: RETRY is at least 1 s, so a healthy run
# delivers a job twice in a second at most (a requeue racing another holder's).
STORM_DELIVERIES = 4


def upgrade_figures(events: list[dict[str, Any]], ok_adds: list[Add]) -> dict[str, int]:
    """A rolling upgrade's figures (chaos/upgrade.py events): the mixed
    phases (from a step after which the nodes run both releases to the next
    step's start), the acknowledged adds invoked in them, the probes, those
    short of a holder, those never acked, the messages dropped as malformed."""
    phases: list[list[float]] = []
    probes: set[str] = set()
    short: set[str] = set()
    acked: set[str] = set()
    across: set[str] = set()
    dropped = 0
    for e in events:
        if e["type"] == "fault" and e.get("phase") == "start" and e.get("name") == "upgrade":
            if phases and len(phases[-1]) == 1:
                phases[-1].append(e["t"])
        if e["type"] != "upgrade":
            continue
        what = e.get("what")
        if what == "releases" and len(set((e.get("nodes") or {}).values())) > 1:
            phases.append([e["t"]])
        elif what == "probe-add":
            probes.add(e["id"])
            if len(e.get("holders") or ()) < 3:         # REPLICATE 3
                short.add(e["id"])
            if len(e.get("holder_releases") or ()) > 1:
                across.add(e["id"])
        elif what == "probe-held":
            if len(e.get("holders") or ()) < 2:         # one node down
                short.add(e["id"])
        elif what == "probe-acked":
            acked.add(e["id"])
        elif what == "malformed":
            dropped += sum((e.get("counts") or {}).values())
    if phases and len(phases[-1]) == 1:
        phases[-1].append(math.inf)
    mixed = sum(1 for a in ok_adds if any(start <= a.t < end for start, end in phases))
    return {"mixed_phases": len(phases), "mixed_phase_adds": mixed,
            "upgrade_probes": len(probes), "upgrade_probes_short": len(short),
            "upgrade_probes_across": len(across),
            "upgrade_probes_unacked": len(probes - acked), "upgrade_malformed": dropped}


def ttl_probes(events: list[dict[str, Any]]
               ) -> tuple[int, list[str], list[str], list[str], list[str]]:
    """The TTL probes (chaos/clock.py TtlProbe): how many, those no node held
    any more before their TTL was over by true time (from the add's invocation:
    no node can start it earlier), and among those the ones allowed: the
    clock of its originator, or of every node seen holding it, stepped forward
    meanwhile (a node cannot tell a jump from a stall, after which the time did
    pass; a copy carries what is left by its sender's clock: docs/operations.md,
    Clocks). Then the copies ("id@node") a node dropped before the TTL was
    over with no forward step of its clock or its originator's (nor a kill)
    to excuse it: the times that cross the bus must not let a skewed clock
    expire a copy early.
    And the prober's errors."""
    adds: dict[str, dict[str, Any]] = {}
    holders: dict[str, set[str]] = defaultdict(set)
    dropped: list[tuple[str, str, float]] = []      # (id, node, t)
    gone: dict[str, float] = {}
    errors: list[str] = []
    forward: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["type"] == "clock" and e.get("step", 0) > 0:
            forward[e["node"]].append(e["t"])
        if e["type"] == "fault" and e.get("phase") == "start" and e.get("name") == "kill -9":
            forward[e["detail"]["node"]].append(e["t"])     # its copies died with it
        if e["type"] != "probe":
            continue
        phase = e.get("phase")
        if phase == "add":
            adds[e["id"]] = e
        elif phase == "held":
            now = set(e.get("holders") or ())
            jid = e["id"]
            if jid not in holders and jid in adds and len(now) < adds[jid]["replicate"]:
                # answered with REPLICATE copies, fewer at the first look: those
                # went before it (which nodes held them, the poll cannot say)
                dropped.extend((jid, "?", e["t"])
                               for _ in range(adds[jid]["replicate"] - len(now)))
            dropped.extend((jid, n, e["t"]) for n in holders[jid] - now)
            holders[jid].update(now)
        elif phase == "gone":
            dropped.extend((e["id"], n, e["t"]) for n in holders[e["id"]])
            gone.setdefault(e["id"], e["t"])
        elif phase == "error":
            errors.append(e.get("error", "?"))
    def stepped(node: str, start: float, end: float) -> bool:
        return any(start <= s <= end for s in forward.get(node, ()))

    early: list[str] = []
    allowed: list[str] = []
    for jid, add in adds.items():
        t = gone.get(jid)
        start = add["t_invoke"]
        if t is None or t >= start + add["ttl"]:
            continue
        seen = (holders[jid] or {add["node"]}) | {add["node"]}
        if stepped(add["node"], start, t) or all(stepped(n, start, t) for n in seen):
            allowed.append(jid)
        else:
            early.append(jid)
    copies = []
    for jid, node, t in dropped:
        add = adds.get(jid)
        if add is None or t >= add["t_invoke"] + add["ttl"]:
            continue
        suspects = [node] if node != "?" else [n for n in forward if n not in holders[jid]]
        if not any(stepped(n, add["t_invoke"], t) for n in suspects + [add["node"]]):
            copies.append(f"{jid}@{node}")
    return len(adds), early, allowed, sorted(set(copies)), errors


def requeue_storms(delivered_of: dict[str, list[Delivery]],
                   nacked_at: dict[str, list[float]]) -> tuple[list[str], int]:
    """Jobs delivered more than STORM_DELIVERIES times within STORM_WINDOW_S
    with no NACK between (by value), and the most deliveries of one job
    within STORM_WINDOW_S seen in the run."""
    storms: list[str] = []
    busiest = 0
    for value, ds in delivered_of.items():
        nacks = sorted(t for i in {d.id for d in ds} if i for t in nacked_at.get(i, ()))
        times = [ds[0].t] + [b.t for a, b in zip(ds, ds[1:])
                             if not any(a.t <= n <= b.t for n in nacks)]
        most = first = 0
        for last, t in enumerate(times):
            while t - times[first] > STORM_WINDOW_S:
                first += 1
            most = max(most, last - first + 1)
        busiest = max(busiest, most)
        if most > STORM_DELIVERIES:
            storms.append(value)
    return storms, busiest
