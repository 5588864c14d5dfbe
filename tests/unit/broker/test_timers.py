"""The timer wheel (broker/timers.py): every operation O(1)/O(log n), a stale
entry never keeps a job alive, stale slots compacted a slice at a time, never a
live job lost or fired twice."""

from __future__ import annotations

import gc
import random
import sys

from broker.job import ACTIVE, Job
from broker.timers import CHUNK, FAR_MS, POP_BUDGET, RESOLUTION_MS, TimerWheel


def J(name) -> Job:
    """A job known by `name` (its id): the wheel takes real Jobs (typed in the
    compiled build)."""
    return Job(str(name).encode(), b"q", b"", ACTIVE, 1, 0, 0, 0, 0)


def name(job: Job) -> str:
    return job.id.decode()


def real_job(n: int) -> Job:
    jid = b"D-dcb833cf-%024d-05a1" % n
    return Job(jid, b"q", b"x" * 1000, ACTIVE, 1, 10**9, 0, 0, 30)


def test_a_cancelled_or_moved_job_is_not_referenced_by_the_wheel():
    # A compiled Job takes no weak reference (no GC header either): its
    # reference count says whether the wheel still holds it.
    wheel = TimerWheel()
    gc.disable()                    # freed by reference counting alone, at once
    try:
        others = [real_job(i) for i in range(3 * CHUNK)]
        for j in others:
            wheel.add(j, 5000)
        cancelled, moved = real_job(10_001), real_job(10_002)
        alone = sys.getrefcount(cancelled)
        wheel.add(cancelled, 5000)
        wheel.add(moved, 5000)
        assert sys.getrefcount(cancelled) == alone + 1
        for j in others[CHUNK:]:
            wheel.add(j, 6000)      # moves: the job leaves a None behind
        wheel.cancel(cancelled)
        wheel.add(moved, 9000)
        wheel.cancel(moved)
        assert sys.getrefcount(cancelled) == alone and sys.getrefcount(moved) == alone
        assert cancelled.timer is None and moved.timer is None
        # Every chunk they left is empty: no slot kept, not even a None.
        assert wheel.stale == 0 and wheel.entries == 3 * CHUNK
    finally:
        gc.enable()
    assert sorted(j.id for j in wheel.pop_due(9000)) == sorted(j.id for j in others)


def test_a_leaving_job_leaves_a_none_until_its_chunk_empties():
    wheel = TimerWheel()
    jobs = [J(i) for i in range(CHUNK + 2)]
    for j in jobs:
        wheel.add(j, 5000)
    full, rest = jobs[:CHUNK], jobs[CHUNK:]
    for j in full[:-1]:
        wheel.cancel(j)
    assert (wheel.entries, wheel.stale) == (CHUNK + 2, CHUNK - 1)
    wheel.add(full[-1], 7000)           # the chunk's last live job moves: its slots go
    assert (wheel.entries, wheel.stale) == (3, 0)
    wheel.add(J(-1), 5000)              # the bucket's last chunk still takes new jobs
    assert sorted(name(j) for j in wheel.pop_due(5000)) == sorted([*(name(j) for j in rest), "-1"])
    assert [name(j) for j in wheel.pop_due(7000)] == [name(full[-1])]


def test_nothing_stays_once_every_job_left():
    wheel = TimerWheel()
    jobs = [J(i) for i in range(3 * CHUNK + 5)]
    for i, j in enumerate(jobs):
        wheel.add(j, 5000 + i % 7 * RESOLUTION_MS)     # seven buckets, several chunks
    for j in jobs[::2]:
        wheel.add(j, FAR_MS * 3)                        # moved: a far bucket
    for j in reversed(jobs):
        wheel.cancel(j)
    assert (wheel.buckets, wheel.heap, wheel.entries, wheel.stale) == ({}, [], 0, 0)


def test_compaction_keeps_each_jobs_slot_right():
    wheel = TimerWheel()
    jobs = [J(i) for i in range(5 * CHUNK + 7)]
    for j in jobs:
        wheel.add(j, 1000)
    for j in jobs[::3]:
        wheel.cancel(j)
    while True:                     # a full sweep, whatever the stale count
        wheel.compact(budget=100)
        if not wheel.needs_compaction():
            break
    assert wheel.stale == 0 and wheel.entries == len(jobs) - len(jobs[::3])
    for j in jobs[1::3]:            # the moved slots still name their jobs
        assert j.timer.jobs[j.timer_slot] is j
        wheel.cancel(j)
    assert wheel.pop_due(1000) == jobs[2::3]


def test_random_operations_with_compaction_fire_each_live_job_once_at_its_time():
    rng = random.Random(5)
    wheel = TimerWheel()
    due: dict = {}                  # live job -> its time
    jobs = [J(i) for i in range(3000)]
    for step in range(30_000):
        j = rng.choice(jobs)
        op = rng.random()
        if op < 0.6:
            t = rng.randrange(10, 2000) * 7        # many jobs share buckets
            wheel.add(j, t)
            due[j] = t
        elif op < 0.9 and j in due:
            wheel.cancel(j)
            del due[j]
        if step % 50 == 0 and wheel.needs_compaction():
            wheel.compact(budget=rng.randrange(1, 400))
    while wheel.needs_compaction():
        wheel.compact(budget=97)
    assert wheel.entries - wheel.stale == len(due)
    fired: dict = {}
    for now in range(0, 2000 * 7 + RESOLUTION_MS, RESOLUTION_MS):
        for j in wheel.pop_due(now):
            assert j not in fired, "fired twice"
            assert due[j] <= now < due[j] + RESOLUTION_MS, (due[j], now)
            fired[j] = now
    assert set(fired) == set(due)
    assert wheel.entries == 0


def test_a_bucket_bigger_than_the_budget_is_compacted_over_several_calls():
    wheel = TimerWheel()
    jobs = [J(i) for i in range(10_000)]
    for j in jobs:
        wheel.add(j, 1000)
    for j in jobs:
        if int(name(j)) % 4:
            wheel.cancel(j)
    calls = 0
    while wheel.needs_compaction():
        wheel.compact(budget=1000)
        calls += 1
    assert calls >= 10
    assert wheel.entries == 2500 and wheel.stale == 0
    assert wheel.pop_due(1000) == jobs[::4]


def test_a_far_job_waits_in_a_coarse_bucket_and_a_big_bucket_pops_in_slices():
    wheel = TimerWheel(now=0)
    far = J("far")
    wheel.add(far, 3_600_000)                   # an hour ahead: popped early...
    early = wheel.next_time()
    assert 3_600_000 - FAR_MS < early <= 3_600_000 - FAR_MS // 2
    many = [J(i) for i in range(3 * POP_BUDGET)]
    for j in many:
        wheel.add(j, 1000)
    popped = []
    while wheel.next_time() <= 1000:
        got = wheel.pop_due(1000)
        assert POP_BUDGET <= len(got) < POP_BUDGET + CHUNK or len(popped) + len(got) == len(many)
        popped += got
    assert popped == many
    assert wheel.pop_due(early) == [far]
    wheel.add(far, 3_600_000)                   # ...and put back in its own 10 ms bucket
    assert wheel.next_time() == 3_600_000
    assert wheel.pop_due(3_600_000) == [far] and wheel.entries == wheel.stale == 0
