"""LATENCY over real sockets, byte for byte as Disque 1.0-rc1 answers (its
replies taken from a disque-server run side by side), and the ``command``
event a slow command (DEBUG SLEEP) leaves once latency-monitor-threshold is
set at run time."""

from __future__ import annotations

import re
import time

import pytest

DISABLED = (b"I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Disque "
            b"instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" "
            b"in order to enable it. If we weren't in a deep space mission I'd suggest to take "
            b"a look at http://disque.io/topics/latency-monitor.\n")
NO_SPIKE = (b"Dave, no latency spike was observed during the lifetime of this Disque instance, "
            b"not in the slightest bit. I honestly think you ought to sit down calmly, take a "
            b"stress pill, and think things over.\n")
SPIKES = (b"Dave, I have observed latency spikes in this Disque instance. You don't mind "
          b"talking about it, do you Dave?\n\n1. command: 1 latency spikes (average 300ms, "
          b"mean deviation 0ms, period %s sec). Worst all time event 300ms.\n\nI have a few "
          b"advices for you:\n\n- Check your Slow Log to understand what are the commands you "
          b"are running which are too slow to execute. Please check "
          b"http://disque.io/commands/slowlog for more information.\n- Deleting, expiring or "
          b"evicting (because of maxmemory policy) large objects is a blocking operation. If "
          b"you have very large objects that are often deleted, expired, or evicted, try to "
          b"fragment those objects into multiple smaller objects.\n")


def bulk(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


def test_replies_and_errors_as_disque_with_the_monitor_off(node):
    raw = node.raw()
    assert raw.call("LATENCY") == b"-ERR wrong number of arguments for 'latency' command\r\n"
    assert raw.call("LATENCY", "LATEST") == b"*0\r\n"
    assert raw.call("LATENCY", "HISTORY", "command") == b"*0\r\n"
    assert raw.call("LATENCY", "RESET") == b":0\r\n"
    assert raw.call("LATENCY", "DOCTOR") == bulk(DISABLED)
    assert raw.call("LATENCY", "GRAPH", "command") == \
        b"-ERR No samples available for event 'command'\r\n"
    for bad in (("foo",), ("LATEST", "x"), ("HISTORY",), ("DOCTOR", "x")):
        assert raw.call("LATENCY", *bad) == b"-ERR syntax error\r\n"
    # Off, a slow command leaves nothing.
    raw.call("DEBUG", "SLEEP", "0.1")
    assert raw.call("LATENCY", "LATEST") == b"*0\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_slow_command_is_a_command_event(node, protocol):
    c = node.client(protocol=protocol)
    assert c.execute_command("CONFIG", "SET", "latency-monitor-threshold", 100)
    assert c.execute_command("CONFIG", "GET", "latency-monitor-threshold") in (
        [b"latency-monitor-threshold", b"100"], {b"latency-monitor-threshold": b"100"})
    assert c.execute_command("LATENCY", "DOCTOR") == NO_SPIKE
    before = int(time.time())
    c.execute_command("DEBUG", "SLEEP", "0.3")
    (event, at, ms, high), = c.execute_command("LATENCY", "LATEST")
    # 300 ms, more on a busy machine (time.sleep may oversleep).
    assert event == b"command" and 300 <= ms < 1000 and high == ms
    assert before <= at <= time.time()
    assert c.execute_command("LATENCY", "HISTORY", "command") == [[at, ms]]
    assert c.execute_command("LATENCY", "HISTORY", "COMMAND") == []     # names: exact case
    # DOCTOR's period: seconds since the oldest sample (at least 1) per sample.
    doctor = c.execute_command("LATENCY", "DOCTOR")
    m = re.search(rb"period (\d+\.\d\d) sec", doctor)
    assert doctor == SPIKES.replace(b"300", b"%d" % ms) % m.group(1)
    graph = c.execute_command("LATENCY", "GRAPH", "command")
    assert graph.startswith(b"command - high %d ms, low %d ms (all time high %d ms)\n" % (
        ms, ms, ms) + b"-" * 80 + b"\n \n \n \n_\n \n")
    assert c.execute_command("LATENCY", "RESET", "COMMAND", "nothing") == 1
    assert c.execute_command("LATENCY", "LATEST") == []
    # Back to 0: nothing is measured any more.
    c.execute_command("CONFIG", "SET", "latency-monitor-threshold", 0)
    c.execute_command("DEBUG", "SLEEP", "0.2")
    assert c.execute_command("LATENCY", "LATEST") == []
