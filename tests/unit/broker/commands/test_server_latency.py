"""The latency monitor's history on an in-process node (virtual clock): what
the shells hand it (``Node.latency_sample``), kept as Disque keeps it: one
sample per second per event (the larger one wins), the last 160, the
all-time maximum, nothing below latency-monitor-threshold or while it is 0."""

from __future__ import annotations


def test_samples_are_kept_from_the_threshold_on_one_per_second(inprocess):
    node = inprocess.node
    node.latency_sample("aof-write", 500)
    assert inprocess.call("LATENCY", "LATEST") == []            # the monitor is off
    assert inprocess.call("CONFIG", "SET", "latency-monitor-threshold", "10") == "OK"
    node.latency_sample("aof-write", 9)                          # below: not kept
    assert inprocess.call("LATENCY", "LATEST") == []
    node.latency_sample("aof-write", 10)
    node.latency_sample("aof-write", 30)                         # same second: the larger
    node.latency_sample("aof-write", 20)
    t0 = node.clock() // 1000
    assert inprocess.call("LATENCY", "HISTORY", "aof-write") == [[t0, 30]]
    # As Disque's latency.c: a sample merged into its second's does not
    # move the all-time high.
    assert inprocess.call("LATENCY", "LATEST") == [[b"aof-write", t0, 30, 10]]
    inprocess.advance(1000)
    node.latency_sample("aof-write", 15)
    assert inprocess.call("LATENCY", "HISTORY", "aof-write") == [[t0, 30], [t0 + 1, 15]]
    assert inprocess.call("LATENCY", "LATEST") == [[b"aof-write", t0 + 1, 15, 15]]


def test_the_history_keeps_the_last_160_seconds_and_the_all_time_high(inprocess):
    node = inprocess.node
    inprocess.call("CONFIG", "SET", "latency-monitor-threshold", "1")
    t0 = node.clock() // 1000
    for i in range(200):
        node.latency_sample("aof-fsync-always", 1000 - i)
        inprocess.advance(1000)
    history = inprocess.call("LATENCY", "HISTORY", "aof-fsync-always")
    assert history == [[t0 + i, 1000 - i] for i in range(40, 200)]
    assert inprocess.call("LATENCY", "LATEST") == [[b"aof-fsync-always", t0 + 199, 801, 1000]]
    assert inprocess.call("LATENCY", "RESET", "AOF-FSYNC-ALWAYS", "other") == 1
    assert inprocess.call("LATENCY", "HISTORY", "aof-fsync-always") == []
