"""The timer wheel (broker/timers.py): every operation O(1)/O(log n), stale
entries compacted a slice at a time, never a live one lost or fired twice."""

from __future__ import annotations

import random

from broker.timers import RESOLUTION_MS, TimerWheel


class J:
    __slots__ = ("name", "timer")

    def __init__(self, name) -> None:
        self.name = name
        self.timer = None


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
    assert wheel.entries - wheel.stale <= len(due) + 1024
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
    for j in jobs[::2]:
        wheel.cancel(j)
    wheel.stale += 2000             # as if more were stale: compaction is due
    calls = 0
    while wheel.needs_compaction():
        wheel.compact(budget=1000)
        calls += 1
    assert calls >= 10
    assert wheel.entries == 5000
    assert wheel.pop_due(1000) == jobs[1::2]
