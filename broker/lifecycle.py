# compiled: mypyc (setup.py builds each module whose first line this is)
"""A job's life on this node: every state change, with its timers, the registry's
accounting and the AOF records it leaves (SPEC sections 3, 5, 7).

    new ──add_pending──> wait-repl ──activate──┐
    new ──add──────────────────────────────────┴─> active <──queue / dequeue──> queued
    copy from a peer ──adopt_replica / adopt_moved──> active        │ deliver
    active ──(timer) requeue, postpone, working                     v
    active / queued ──ack──> acked ──(timer) ack GC──> delete        active
    any ──delete / expire / flush_all──> gone

    (ext) a job added with HOLD is `held` where the others say active (add,
    activate, adopt_replica): no timer queues it, until
    held ──release (ENQUEUE here)──> queued (or active until its DELAY)
    held ──released_elsewhere (another holder's QUEUED...)──> active

Commands, the cluster's message handlers and the AOF loader call these functions
on a node (a Registry: broker/registry.py, below this module and the Node);
nothing else assigns ``job.state``, ``job.requeue_time`` or ``job.gc_time``. The
cluster layer is told through the node's ``cluster`` (broker/cluster_hooks.py:
``job_queued``, ``job_deleted``, ``send_willqueue``, ``try_job_gc``...): this
module imports nothing above the broker core.

Persistence is an output: a change that must survive a restart appends an item
to ``node.records`` (broker/records.py) while ``node.persist`` is on, whatever
caused it; the shell writes them before the replies and bus messages of the same
input leave. With ``node.persist_history`` (aof-history) the job's history is
recorded too: deliveries, NACKs, requeues, and expirations told from deletions.
"""

from __future__ import annotations

from typing import Final

from broker import draws
from broker.job import (
    ACKED, ACTIVE, FLAG_BCAST_WILLQUEUE, FLAG_DELIVERED, FLAG_DUMMY_ACK, FLAG_KEY_ANSWERED,
    FLAG_QUEUED_ONCE, JOB_OVERHEAD, QUEUED, WAIT_REPL, Job, job_from_fields,
    job_shard,
)
from broker.job import FLAG_HELD, HELD
from broker.queue import PAUSED_IN, PAUSED_OUT, Queue
from broker.records import (
    REC_ACK, REC_DEL, REC_DELIVERED, REC_EXPIRED, REC_FLUSHALL, REC_GOT, REC_NACK, REC_RELEASED,
    REC_REQUEUE,
)
from broker.registry import Registry
from disquette import job_record as field

WILLQUEUE_ADVANCE_MS: Final = 500      # SPEC section 8: WILLQUEUE 500 ms before requeue
REQUEUE_JITTER_MS: Final = 250         # SPEC section 5: +-250 ms
GC_FIRST_MS: Final = 1000              # ack GC: first retry after 1 s, doubling...
GC_MAX_MS: Final = 180_000             # ...capped near 3 min


# ------------------------------------------------------------------- timers
def wake_time(job: Job) -> int:
    """When the timer wheel must next look at a job, derived from its state."""
    t = job.etime
    state = job.state
    if state == ACTIVE:
        q = job.requeue_time
        if q:
            if job.nodes_delivered and not job.flags & FLAG_BCAST_WILLQUEUE:
                q -= WILLQUEUE_ADVANCE_MS
            if q < t:
                t = q
    elif state == ACKED:
        q = job.gc_time
        if q and q < t:
            t = q
    return t


def schedule(node: Registry, job: Job) -> None:
    node.timers.add(job, wake_time(job))


def jitter(node: Registry) -> int:
    """In [-250, 250] ms, from a 31-bit linear congruential sequence seeded by
    the node's random source: C integer arithmetic in the compiled build, where
    rng.random() was a method call on every delivery; spread enough for a jitter."""
    x = (node.jitter_state * 1103515245 + 12345) & 0x7FFFFFFF
    node.jitter_state = x
    return (x >> 8) % (2 * REQUEUE_JITTER_MS + 1) - REQUEUE_JITTER_MS


# ------------------------------------------------------------------ registry
def _register(node: Registry, job: Job) -> None:
    jid = job.id
    shard = node.job_shards[job_shard(jid)]
    size = len(shard)
    shard[jid] = job            # one lookup in a table that is cold with many jobs
    if len(shard) != size:      # a new id
        node.job_count += 1
        node.jobs_memory += job.memory_size()
    schedule(node, job)


def _record_job(node: Registry, job: Job) -> None:
    if node.persist:
        node.records.append(job)


def new_job(node: Registry, queue: bytes, body: bytes, repl: int, ttl: int, delay: int,
            retry: int, now: int) -> Job:
    """A job created here (ADDJOB): its id, expire time, ctime and, with DELAY,
    the time it is first queued. Not registered yet (add / add_pending)."""
    jid = node.ids.new(node.myself_id, ttl, retry)
    job = Job(jid, queue, body, WAIT_REPL, repl, node.shared_time(now, ttl),
              node.new_ctime(now), delay, retry)
    if delay:
        job.requeue_time = node.shared_time(now, delay)
    return job


def hold(job: Job) -> None:
    """(ext) ADDJOB ... HOLD: the new job goes live held (add, activate) and
    its copies too (the flag travels in REPLJOB); its DELAY starts at release."""
    job.flags |= FLAG_HELD
    job.requeue_time = 0


def add(node: Registry, job: Job, now: int) -> None:
    """A new job whose only copy is here: live at once (logged, queued unless
    delayed or held)."""
    if job.flags & FLAG_HELD:
        job.state = HELD
        _register(node, job)
        _record_job(node, job)
        return
    job.state = ACTIVE
    _register(node, job)
    _record_job(node, job)
    if not job.delay:
        queue(node, job, now)


def add_pending(node: Registry, job: Job) -> None:
    """A new job waiting for its copies to be confirmed (sync replication): held
    here but not live, so not logged yet."""
    job.state = WAIT_REPL
    _register(node, job)


def activate(node: Registry, job: Job, now: int) -> None:
    """A wait-repl job is live (its copies are confirmed, or ASYNC): log it and
    queue it unless delayed or held."""
    if job.flags & FLAG_HELD:
        job.state = HELD
        _record_job(node, job)
        return
    job.state = ACTIVE
    _record_job(node, job)
    if not job.delay:
        queue(node, job, now)
    else:
        schedule(node, job)


def merge_counters(job: Job, nacks: int, additional_deliveries: int) -> None:
    """Counters are a property of the job, not of the copy: a copy that is ahead
    (QUEUED, YOURJOBS, REPLJOB) brings them here (issue 16, SPEC section 3)."""
    if nacks > job.nacks:
        job.nacks = nacks
    if additional_deliveries > job.additional_deliveries:
        job.additional_deliveries = additional_deliveries


def adopt_replica(node: Registry, fields: list, now: int, skew: int = 0) -> Job:
    """REPLJOB: hold a copy of a peer's job. A new copy is active, logged, and
    re-queued by its own timer only if the copy queued elsewhere is not acked in
    time (delay + retry from now, replication itself may take a while); an
    existing copy learns the holders and counters it did not know. ``skew``:
    our clock minus the sender's (the job's ctime is in the sender's)."""
    jid: bytes = fields[field.ID]     # bytes, as protocol/bus.py checked it
    job = node.get_job(jid)
    me = node.myself_id
    if job is not None:
        job.nodes_delivered = node.holders.of((*(job.nodes_delivered or (me,)), *(fields[field.NODES_DELIVERED] or ())))
        merge_counters(job, fields[field.NACKS], fields[field.ADDITIONAL_DELIVERIES])
        return job
    job = job_from_fields(fields, node.holders)
    job.state = ACTIVE
    # Our retry timer fires only if the copy queued elsewhere was not acked in
    # time: queueing it then is a redelivery (additional-deliveries).
    job.flags = FLAG_DELIVERED if job.retry else 0
    # The sender's list already names it when it keeps a copy; an external
    # replication (no copy there) must not list it.
    job.nodes_delivered = node.holders.with_holder(job.nodes_delivered, me)
    job.nodes_confirmed = None
    if fields[field.FLAGS] & FLAG_HELD:
        # (ext) Held: no timer until a holder releases it (released_elsewhere).
        job.state = HELD
        job.flags |= FLAG_HELD
    elif job.retry:
        # ctime is the sender's: with its clock ahead of ours, unconverted,
        # the copy's timer waited that far too (the simulator's seed 3598 of
        # the clock sweep: 261 s, beyond the copy's own retry)
        start = max(now, job.ctime // 1_000_000 + skew + job.delay * 1000)
        job.requeue_time = start + job.retry * 1000 + jitter(node)
    _register(node, job)
    _record_job(node, job)
    remember_key(node, job, now)
    return job


def adopt_moved(node: Registry, fields: list, sender: str, now: int):
    """YOURJOBS: a job moved here by federation, to be queued here (the caller
    queues it). None when our copy is acked. RETRY 0 jobs left the sender: we
    are their only holder."""
    jid = bytes(fields[field.ID])
    job = node.get_job(jid)
    if job is not None:
        if job.state == ACKED:
            return None
        merge_counters(job, fields[field.NACKS], fields[field.ADDITIONAL_DELIVERIES])
        if job.state == HELD:
            _unhold(node, job)      # queued elsewhere: it was released there
        return job
    job = job_from_fields(fields, node.holders)
    job.state = ACTIVE
    job.flags &= ~FLAG_HELD
    if job.retry:
        job.nodes_delivered = node.holders.of(
            (*(job.nodes_delivered or ()), sender, node.myself_id))
    else:
        job.nodes_delivered = None
    job.nodes_confirmed = None
    _register(node, job)
    _record_job(node, job)
    remember_key(node, job, now)
    return job


def add_dummy_ack(node: Registry, jid: bytes, ttl: int, now: int) -> Job:
    """ACKJOB of an id never held here: an acked placeholder the cluster's ack GC
    spreads (SPEC section 8). Not logged: it holds nothing to lose."""
    job = Job(jid, b"", b"", ACKED, 0, now + ttl * 1000, node.new_ctime(now), 0, 0)
    job.flags |= FLAG_DUMMY_ACK
    job.gc_time = now
    _register(node, job)
    return job


# -------------------------------------------------------------------- queues
def can_queue(job: Job) -> bool:
    """Not queued already, and not an at-most-once job already delivered."""
    return job.state != QUEUED and not (job.retry == 0 and job.flags & FLAG_DELIVERED)


def queue(node: Registry, job: Job, now: int) -> bool:
    """Put a job in its queue (Disque's queueJob). False if it is already queued,
    or is an at-most-once job already delivered. The other holders hear of it
    (QUEUED, with the counters: count a requeue before calling this)."""
    if not can_queue(job):
        return False
    job.state = QUEUED
    job.flags |= FLAG_QUEUED_ONCE
    # The requeue time runs from the moment of queueing; the jitter is added at
    # delivery so that a burst of queued jobs shares one int.
    job.requeue_time = node.shared_time(now, job.retry) if job.retry else 0
    q = node.queues.get(job.queue)
    if q is None:
        q = node.queues[job.queue] = Queue(job.queue, now)
    q.jobs.add(job)
    q.atime = now
    q.jobs_in += 1
    if q.blocked and not q.flags & PAUSED_OUT:
        node.ready_queues.append(q)
    node.cluster.job_queued(job)
    return True


def dequeue(node: Registry, job: Job) -> bool:
    """Take a queued job out of its queue; it stays here, active."""
    if job.state != QUEUED:
        return False
    q = node.queues.get(job.queue)
    if q is not None:
        q.remove(job)
    job.state = ACTIVE
    return True


def enqueue_after_delay(node: Registry, job: Job, now: int) -> None:
    """ENQUEUE from the originator of an externally replicated job: queue it
    now, or when its DELAY has elapsed."""
    awake = job.ctime // 1_000_000 + job.delay * 1000
    if job.delay and awake > now:
        job.requeue_time = awake
        schedule(node, job)
    else:
        queue(node, job, now)


def requeue(node: Registry, job: Job, now: int, nack: bool) -> bool:
    """NACK (nacks + 1) or ENQUEUE of an active job. As Disque: queueing a job
    for the first time here (a DELAY job put in its queue early) is not an
    additional delivery; a NACK always counts; an at-most-once job is queued
    once at most, even if dequeued. (ext) ENQUEUE of a held job releases it."""
    if job.state != ACTIVE or not can_queue(job):
        if job.state == HELD and not nack:
            release(node, job, now)
            return True
        return False
    again = job.flags & FLAG_QUEUED_ONCE
    if again and not job.retry:
        return False
    # Counted first: the QUEUED that queue() sends carries the new counters.
    if nack:
        job.nacks += 1
    elif again:
        job.additional_deliveries += 1
    queue(node, job, now)
    schedule(node, job)
    if node.persist_history:
        node.records.append((REC_NACK if nack else REC_REQUEUE, job.id))
    return True


def _unhold(node: Registry, job: Job) -> None:
    """A held job is live like any other from now on (logged: a restart must
    not hold it again)."""
    job.state = ACTIVE
    job.flags &= ~FLAG_HELD
    if node.persist:
        node.records.append((REC_RELEASED, job.id))


def release(node: Registry, job: Job, now: int) -> None:
    """(ext) ENQUEUE of a held job: queued here now, or once its DELAY has
    elapsed from now; no delivery is counted (it never was queued). The
    other holders hear of it (QUEUED) and re-queue it after delay + retry
    if the copy here is not acked by then, as for any job."""
    _unhold(node, job)
    job.flags &= ~FLAG_DELIVERED    # a replica's mark: queueing it here is no redelivery
    if job.nodes_delivered:
        node.cluster.job_released(job)
    if job.delay:
        job.requeue_time = node.shared_time(now, job.delay)
    else:
        queue(node, job, now)
    schedule(node, job)


def released_elsewhere(node: Registry, job: Job, now: int) -> None:
    """(ext) Another holder released a job held here: ours is active, re-queued
    (a redelivery) only if that holder's copy is not acked in time: its DELAY,
    then RETRY, from now, as a copy adopted by REPLJOB."""
    _unhold(node, job)
    if job.retry:
        job.flags |= FLAG_DELIVERED
        job.requeue_time = now + (job.delay + job.retry) * 1000 + jitter(node)
    schedule(node, job)


def deliver(node: Registry, q: Queue, now: int) -> Job | None:
    """Take the oldest job of q for a client (Disque's queueFetchJob), or None."""
    job = q.jobs.popleft()
    if job is None:
        return None
    job.state = ACTIVE
    job.flags |= FLAG_DELIVERED
    if job.retry:
        job.requeue_time += jitter(node)
        job.flags &= ~FLAG_BCAST_WILLQUEUE
        schedule(node, job)
        if node.persist_history:
            node.records.append((REC_GOT, job.id))
    elif node.persist:      # a delivered RETRY 0 job is never queued again
        node.records.append((REC_DELIVERED, job.id))
    q.atime = now
    q.jobs_out += 1
    return job


def take_for_peer(node: Registry, job: Job, receiver: str, now: int) -> None:
    """Federation moves a queued job to `receiver` (YOURJOBS): RETRY 0 jobs leave
    us; others stay here active, re-queued by us after retry if not acked."""
    job.state = ACTIVE
    if job.retry == 0:
        delete(node, job)
        return
    holders = node.holders
    job.nodes_delivered = holders.with_holder(
        holders.with_holder(job.nodes_delivered, node.myself_id), receiver)
    job.requeue_time = now + job.retry * 1000
    job.flags |= FLAG_DELIVERED     # our requeue would be a redelivery
    schedule(node, job)


def postpone(node: Registry, job: Job, now: int) -> None:
    """Another holder queued it or a client works on it (QUEUED, WORKING from a
    peer): our requeue moves one retry period (with jitter) ahead."""
    if job.state == HELD:
        return              # (ext) never queued by a timer: nothing to postpone
    if job.state == QUEUED:
        dequeue(node, job)
    if job.retry:
        job.requeue_time = now + job.retry * 1000 + jitter(node)
        job.flags &= ~FLAG_BCAST_WILLQUEUE
        schedule(node, job)


def working(node: Registry, job: Job, now: int) -> None:
    """WORKING: the client still processes the job; requeue retry seconds from
    now (the other holders are told directly, no WILLQUEUE)."""
    if job.state == HELD:
        return              # (ext) never queued by a timer: nothing to postpone
    if job.state == QUEUED:
        dequeue(node, job)
    job.flags |= FLAG_BCAST_WILLQUEUE
    job.requeue_time = now + job.retry * 1000
    schedule(node, job)


# ---------------------------------------------------------------------- acks
def ack(node: Registry, job: Job, now: int, gc_in: int = 0) -> None:
    """The job was processed: acked until every holder knows (the cluster's ack
    GC, first attempt `gc_in` ms from now), then deleted."""
    if job.state == QUEUED:
        dequeue(node, job)
    job.state = ACKED
    job.gc_time = now + gc_in
    job.nodes_confirmed = None      # from now on: holders that confirmed the ack
    job.gc_retry = 0
    if node.persist:                # a reload must not make it live again
        node.records.append((REC_ACK, job.id))
    if gc_in:
        schedule(node, job)


def gc_backoff(node: Registry, job: Job, now: int) -> None:
    """The ack GC did not finish: try again later (1 s doubling, capped near 3
    min, with jitter)."""
    backoff = min(GC_FIRST_MS << min(job.gc_retry, 20), GC_MAX_MS)
    job.gc_retry += 1
    job.gc_time = now + backoff + draws.randint(node.rng, 0, backoff // 4)
    if node.is_registered(job):
        schedule(node, job)


# ------------------------------------------------------------------ deletion
def delete(node: Registry, job: Job, record: int = REC_DEL) -> None:
    """Forget a job here, whatever its state (ack GC, DELJOB, FASTACK, TTL,
    eviction, federation moving a RETRY 0 job); ``record``: the AOF record
    kind that says so."""
    shard = node.job_shards[job_shard(job.id)]
    if shard.get(job.id) is not job:
        return
    if job.state == QUEUED:
        dequeue(node, job)
    del shard[job.id]
    node.job_count -= 1
    node.jobs_memory -= job.memory_size()
    node.timers.cancel(job)
    if node.persist:
        node.records.append((record, job.id))
    if job.state == WAIT_REPL:
        forget_key(node, job)       # its ADDJOB failed: the job never existed
    node.cluster.job_deleted(job)


def expire(node: Registry, job: Job) -> None:
    node.stats["expired_jobs"] += 1
    delete(node, job, REC_EXPIRED if node.persist_history else REC_DEL)


def flush_all(node: Registry, record: bool = True) -> None:
    """DEBUG FLUSHALL, CLUSTER RESET HARD: drop every job and queue (queues with
    blocked clients stay, empty)."""
    node.cluster.jobs_flushed()     # pending ADDJOBs end with -NOREPL
    for shard in node.job_shards:
        shard.clear()
    node.job_count = 0
    node.jobs_memory = 0
    node.timers.clear()
    for q in node.queues.values():
        q.jobs.clear()
    node.queues = {name: q for name, q in node.queues.items() if q.blocked}
    node.idempotency.clear()
    if record and node.persist:
        node.records.append((REC_FLUSHALL, None))


# ------------------------------------------- (ext) IDEMPOTENCY keys of jobs
def remember_key(node: Registry, job: Job, now: int) -> None:
    """A job added with a key is here (created, or a copy arrived): the key
    names it until the job's TTL, even once it is acked and deleted."""
    key = job.idem_key
    if key is not None:
        node.idempotency.remember(job.queue, key, job.id, job.etime, now)


def key_answered(node: Registry, job: Job) -> None:
    """A retried ADDJOB got this copy's id here: the producer counts on it, so
    its originator's DELJOB (a failed add) no longer deletes it. Logged again
    (a later record replaces the earlier): a restart keeps the flag."""
    if not job.flags & FLAG_KEY_ANSWERED:
        job.flags |= FLAG_KEY_ANSWERED
        _record_job(node, job)


def forget_key(node: Registry, job: Job) -> None:
    """The job's add failed (-NOREPL, or its originator deleted the unacked
    copies): a retry must create it, not get the id of a job that is gone."""
    key = job.idem_key
    if key is not None:
        node.idempotency.forget(job.queue, key, job.id)


# -------------------------------------------------------------------- timers
def process_due(node: Registry, job: Job, now: int) -> None:
    """A job's timer fired (Disque's processJob): expire, (re)queue, announce the
    requeue (WILLQUEUE), or try the ack GC."""
    if job.etime <= now:
        expire(node, job)
        return
    state = job.state
    cluster = node.cluster
    if state == ACTIVE and job.requeue_time:
        if job.requeue_time <= now:
            q = node.queues.get(job.queue)
            if q is not None and q.flags & PAUSED_IN:
                # Paused in: no requeue; try again one retry period later.
                job.requeue_time = now + max(job.retry, 1) * 1000
            else:
                if can_queue(job):
                    if job.flags & FLAG_DELIVERED:
                        # Counted first: the QUEUED sent to the other holders
                        # carries it (counters are the job's, not the copy's).
                        job.additional_deliveries += 1
                        node.stats["requeued_jobs"] += 1
                        if node.persist_history:
                            node.records.append((REC_REQUEUE, job.id))
                    cluster.before_requeue(job)
                    queue(node, job, now)
                else:
                    job.requeue_time = 0    # at-most-once job already delivered
        elif not job.flags & FLAG_BCAST_WILLQUEUE:
            job.flags |= FLAG_BCAST_WILLQUEUE
            # Holders re-queue in node-id order: ours may come later.
            job.requeue_time += cluster.send_willqueue(job)
    elif state == ACKED and job.gc_time <= now:
        cluster.try_job_gc(job, now)
    if node.is_registered(job):
        schedule(node, job)


# ------------------------------------------------------------ the AOF loader
def restore(node: Registry, jobs: list, recorded_requeue_times, now: int, plain: bool) -> int:
    """Register jobs loaded from the AOF (SPEC section 7): they come back active
    (or acked when other holders must still learn the ack), re-queued by their
    timers: at the recorded requeue time while it is ahead, else now + retry;
    RETRY 0 jobs get none (never queued again by a load) unless a DELAY has not
    elapsed. Expired jobs and jobs acked here only are dropped. A later copy of
    an id replaces the earlier one. Returns how many were dropped as expired.
    `plain`: the loader knows no job is acked, expired or held elsewhere.

    This is registration without one Python call per job: loading a million
    jobs fast depends on it."""
    n = len(jobs)
    nq = {r: node.shared_time(now, r) if r else 0 for r in {j.retry for j in jobs}}
    times = [q if q > now else nq[j.retry] for j, q in zip(jobs, recorded_requeue_times)]
    shards = node.job_shards
    if plain:
        # The common case, vectorised: no cluster holders, nothing acked or
        # expired: every job goes in, woken at its requeue time or expiry.
        wakes = []
        for job, t in zip(jobs, times):
            job.requeue_time = t
            wakes.append(t if t and t < job.etime else job.etime)
        for job in jobs:
            jid = job.id
            shard = shards[job_shard(jid)]
            old = shard.get(jid)
            if old is not None:
                _unload(node, shard, old)
            shard[jid] = job
        node.job_count += n
        node.jobs_memory += sum(len(j.body) for j in jobs) + n * JOB_OVERHEAD  # Job.memory_size
        timers = node.timers
        if n and wakes.count(wakes[0]) == n:
            timers.add_many(jobs, wakes[0])
        else:
            for job, w in zip(jobs, wakes):
                timers.add(job, w)
        return 0
    expired = 0
    for job, t in zip(jobs, times):
        jid = job.id
        shard = shards[job_shard(jid)]
        old = shard.get(jid)
        if old is not None:
            _unload(node, shard, old)
        if job.etime <= now:
            expired += 1
            continue
        job.requeue_time = t if job.state != HELD else 0    # (ext) held: no timer
        if job.state == ACKED:
            if not job.nodes_delivered:
                continue            # acked here only: nothing left to do
            job.gc_time = now       # the cluster's ack GC picks it up
        _register(node, job)
    return expired


def _unload(node: Registry, shard: dict, job: Job) -> None:
    """Drop a loaded job again (a later record replaces or deletes it); nothing
    is queued while loading and nothing is logged back."""
    del shard[job.id]
    node.job_count -= 1
    node.jobs_memory -= job.memory_size()
    node.timers.cancel(job)


def restore_delete(node: Registry, jid: bytes) -> bool:
    shard = node.job_shards[job_shard(jid)]
    job = shard.get(jid)
    if job is None:
        return False
    _unload(node, shard, job)
    return True


def restore_ack(node: Registry, jid: bytes, now: int) -> bool:
    shard = node.job_shards[job_shard(jid)]
    job = shard.get(jid)
    if job is None or job.state == ACKED:
        return False
    if job.nodes_delivered:
        job.state = ACKED
        job.gc_time = now
        schedule(node, job)
    else:
        _unload(node, shard, job)
    return True


def restore_delivered(node: Registry, jid: bytes) -> None:
    job = node.job_shards[job_shard(jid)].get(jid)
    if job is not None:
        job.flags |= FLAG_DELIVERED
        if job.retry == 0:
            job.requeue_time = 0


def restore_released(node: Registry, jid: bytes, now: int) -> Job | None:
    """(ext) A held job released before the restart: back active, re-queued by
    its timer (its DELAY, else its RETRY, from now). The job, or None if it
    was not held here."""
    job = node.job_shards[job_shard(jid)].get(jid)
    if job is None or job.state != HELD:
        return None
    job.state = ACTIVE
    job.flags &= ~FLAG_HELD
    if job.delay:
        job.requeue_time = now + job.delay * 1000
    elif job.retry:
        job.requeue_time = node.shared_time(now, job.retry)
    schedule(node, job)
    return job


def restore_queued(node: Registry, jobs: list, now: int) -> None:
    """aof-enqueue-jobs-once: jobs recorded as queued go back in their queues."""
    for job in jobs:
        if job.state == ACTIVE and node.is_registered(job):
            queue(node, job, now)
