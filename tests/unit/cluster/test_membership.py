"""cluster/membership.py: node table, MEET handshake, gossip, PFAIL/FAIL, nodes.conf.

Messages are carried by a tiny synchronous "wire" that really encodes and decodes
every message (protocol/bus.py), so anything the membership puts on the bus must
survive msgpack.
"""

import random
from collections import deque

import pytest

from broker.job import random_node_id
from cluster.membership import BLACKLIST_TTL, Membership, MembershipError
from cluster.outputs import (
    NODE_ADDED, NODE_DELETED, NODE_FAIL, NODE_PFAIL, NODE_RECOVERED, DropLink, Link,
    NodeEvent, SaveConfig, Send,
)
from protocol.bus import (
    FAIL, FLAG_FAIL, FLAG_HANDSHAKE, FLAG_LEAVING, FLAG_NOADDR, FLAG_PFAIL, MEET, PING,
    PONG, REPLJOB, GossipEntry, decode_body, encode_body,
)

T = 1000   # node timeout used throughout (ms)


def make(i, timeout=T, ip=None):
    rng = random.Random(i)
    return Membership(random_node_id(rng), ip if ip is not None else f"10.0.0.{i}",
                      7711, 17711, node_timeout=timeout, rng=rng)


class Wire:
    """Delivers Sends at once (breadth first), by address; ``down`` nodes and
    ``cut`` (src, dst) pairs drop them. Records every output."""

    def __init__(self, *members):
        self.members = list(members)
        self.down = set()
        self.cut = set()
        self.log = []

    def add(self, m):
        self.members.append(m)

    def by_addr(self, ip, bus_port):
        for m in self.members:
            if (m.myself.ip, m.myself.bus_port) == (ip, bus_port):
                return m
        return None

    def run(self, src, outputs, now):
        work = deque((src, o) for o in outputs)
        while work:
            s, out = work.popleft()
            self.log.append((s, out))
            if not isinstance(out, Send):
                continue
            dst = self.by_addr(out.ip, out.bus_port)
            if dst is None or dst in self.down or (s, dst) in self.cut:
                continue
            msg = decode_body(encode_body(out.msg))
            for o in dst.handle_message(Link(s.myself.ip, dst.myself.ip), msg, now):
                work.append((dst, o))

    def tick_all(self, now):
        for m in self.members:
            if m not in self.down:
                self.run(m, m.tick(now), now)

    def events(self, member=None, kind=None):
        return [o for s, o in self.log if isinstance(o, NodeEvent)
                and (member is None or s is member) and (kind is None or o.kind == kind)]


def join(*members, now=0):
    """MEET chain + ticks until everyone knows everyone."""
    w = Wire(*members)
    for a, b in zip(members[1:], members):
        w.run(a, a.meet(b.myself.ip, b.myself.bus_port, now), now)
    t = now
    ids = {m.node_id for m in members}
    for _ in range(50):
        t += 100
        w.tick_all(t)
        if all(set(m.known_ids()) == ids and len(m.nodes) == len(ids) for m in members):
            return w, t
    raise AssertionError("cluster did not join: " + repr([m.nodes_lines() for m in members]))


# -- MEET handshake ------------------------------------------------------------------

def test_meet_handshake_both_sides_learn_the_real_ids():
    a, b = make(1), make(2)
    w = Wire(a, b)
    out = a.meet("10.0.0.2", 17711, 0)
    (send,) = [o for o in out if isinstance(o, Send)]
    assert send.msg.type == MEET and (send.ip, send.bus_port) == ("10.0.0.2", 17711)
    temp = send.node_id
    assert a.nodes[temp].flags & FLAG_HANDSHAKE and temp != b.node_id
    assert a.known_ids() == [a.node_id]                 # handshake nodes don't count
    assert "handshake" in a.nodes_lines()[1]

    w.run(a, out, 0)
    # a got b's PONG echoing the temporary id: the handshake node took b's real id.
    assert temp not in a.nodes and a.is_known(b.node_id)
    assert [e.node_id for e in w.events(a, NODE_ADDED)] == [b.node_id]
    assert any(isinstance(o, DropLink) and o.node_id == temp and o.forget for _, o in w.log)
    assert any(s is a and isinstance(o, SaveConfig) and b.node_id in o.text for s, o in w.log)
    # b trusted the MEET and started its own handshake towards a's address.
    (hs,) = [n for n in b.nodes.values() if n.flags & FLAG_HANDSHAKE]
    assert (hs.ip, hs.bus_port) == ("10.0.0.1", 17711)
    w.run(b, b.tick(100), 100)
    assert b.is_known(a.node_id) and len(b.nodes) == 2


def test_ping_from_unknown_node_is_answered_but_not_trusted():
    a, b = make(1), make(2)
    w = Wire(a, b)
    w.run(a, a.handle_message(None, b.message(PING, a.node_id), 0), 0)
    assert len(a.nodes) == 1            # only MEET (or gossip) adds nodes
    assert any(isinstance(o, Send) and o.msg.type == PONG for s, o in w.log if s is a)


def test_meet_rejects_bad_addresses():
    a = make(1)
    with pytest.raises(MembershipError, match="Invalid node address"):
        a.meet("not-an-ip", 17711, 0)
    with pytest.raises(MembershipError):
        a.meet("10.0.0.2", 0, 0)


def test_meet_twice_same_address_keeps_one_handshake():
    a = make(1)
    a.meet("10.0.0.2", 17711, 0)
    a.meet("10.0.0.2", 17711, 0)
    assert sum(1 for n in a.nodes.values() if n.flags & FLAG_HANDSHAKE) == 1


def test_handshake_times_out():
    a = make(1)
    a.meet("10.0.0.9", 17711, 0)
    a.tick(T)
    assert len(a.nodes) == 2
    out = a.tick(T + 1)
    assert len(a.nodes) == 1 and any(isinstance(o, DropLink) for o in out)


def test_meeting_my_own_address_drops_the_handshake():
    a = make(1)
    w = Wire(a)
    w.run(a, a.meet("10.0.0.1", 17711, 0), 0)
    assert len(a.nodes) == 1


def test_node_learns_its_own_ip_from_meet():
    a, b = make(1, ip=""), make(2)
    w = Wire(b)
    out = b.meet("10.0.0.1", 17711, 0)
    (send,) = [o for o in out if isinstance(o, Send)]
    a.handle_message(Link("10.0.0.2", "10.0.0.1"), decode_body(encode_body(send.msg)), 0)
    assert a.myself.ip == "10.0.0.1"


# -- gossip ----------------------------------------------------------------------------

def test_gossip_spreads_nodes_nobody_met_directly():
    nodes = [make(i) for i in range(1, 7)]
    w, t = join(*nodes)            # chain: each met only its predecessor
    for m in nodes:
        assert len(m.known_ids()) == 6
        assert all(not n.failing for n in m.nodes.values())


def test_ping_carries_gossip_and_header():
    nodes = [make(i) for i in range(1, 5)]
    w, t = join(*nodes)
    a = nodes[0]
    a.set_leaving(True, t)
    pings = [o for o in a.tick(t + T) if isinstance(o, Send) and o.msg.type == PING]
    assert pings
    msg = pings[0].msg
    assert (msg.sender, msg.ip, msg.port, msg.bus_port) == (a.node_id, "10.0.0.1", 7711, 17711)
    assert msg.flags & FLAG_LEAVING
    assert msg.payload == pings[0].node_id
    assert 1 <= len(msg.gossip) <= 3
    assert all(isinstance(g, GossipEntry) and g.node_id not in (a.node_id, pings[0].node_id)
               for g in msg.gossip)


def test_leaving_is_advertised_and_shown_with_priority_100():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    w.run(a, a.set_leaving(True, t), t)
    assert a.leaving and "leaving" in a.nodes_lines()[0]
    w.tick_all(t + T)
    for m in (b, c):
        n = m.nodes[a.node_id]
        assert n.flags & FLAG_LEAVING
        assert dict((i, p) for i, _, _, p in m.hello_entries())[a.node_id] == 100
        assert a.node_id not in m.reachable_ids()
    w.run(a, a.set_leaving(False, t + T), t + T)
    w.tick_all(t + 2 * T)
    assert not b.nodes[a.node_id].flags & FLAG_LEAVING


# -- failure detection ---------------------------------------------------------------------

def test_pfail_after_node_timeout_without_pong():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    w.down.add(c)
    t0 = t
    # c is pinged within node_timeout/2; PFAIL only once a ping is older than T.
    pfail_at = None
    for step in range(1, 40):
        now = t0 + step * 100
        w.tick_all(now)
        if a.nodes[c.node_id].flags & (FLAG_PFAIL | FLAG_FAIL) and pfail_at is None:
            pfail_at = now
    assert pfail_at is not None
    ping_sent = [e for e in w.events(a, NODE_PFAIL) if e.node_id == c.node_id]
    assert ping_sent
    assert pfail_at - t0 > T            # not before node_timeout
    assert pfail_at - t0 <= T + T // 2 + 200   # pinged every T/2 at the latest


def test_fail_needs_a_majority():
    # 5 nodes: a alone seeing e PFAIL is not enough, a + b neither (2 of 5), a third
    # report makes it FAIL, which a broadcasts.
    ns = [make(i) for i in range(1, 6)]
    a, b, c, d, e = ns
    w, t = join(*ns)
    w.down.update({b, c, d, e})       # only a ticks; nobody gossips to it
    for _ in range(20):
        t += 100
        w.tick_all(t)
    assert a.nodes[e.node_id].flags & FLAG_PFAIL
    assert not a.nodes[e.node_id].flags & FLAG_FAIL

    def report(frm, now):
        g = [GossipEntry(e.node_id, "10.0.0.5", 7711, 17711, FLAG_PFAIL, 1500, 2500)]
        msg = frm.message(PING, a.node_id, g)
        return a.handle_message(Link(frm.myself.ip, a.myself.ip), msg, now)

    report(b, t)
    assert not a.nodes[e.node_id].flags & FLAG_FAIL
    out = report(c, t + 10)
    assert a.nodes[e.node_id].flags & FLAG_FAIL
    (ev,) = [o for o in out if isinstance(o, NodeEvent) and o.kind == NODE_FAIL]
    how, reporters, size = ev.detail
    assert how == "quorum" and size == 5 and set(reporters) == {a.node_id, b.node_id, c.node_id}
    fails = [o for o in out if isinstance(o, Send) and o.msg.type == FAIL]
    assert {o.node_id for o in fails} == {b.node_id, c.node_id, d.node_id}
    assert all(o.msg.payload == e.node_id for o in fails)
    assert any(isinstance(o, SaveConfig) and "fail" in o.text for o in out)


def test_old_failure_reports_expire():
    ns = [make(i) for i in range(1, 4)]
    a, b, c = ns
    w, t = join(*ns)
    g = [GossipEntry(c.node_id, "10.0.0.3", 7711, 17711, FLAG_PFAIL, 1500, 2500)]
    a.handle_message(None, b.message(PING, a.node_id, g), t)   # b's report, early
    w.down.add(b)
    for step in range(1, 21):         # c keeps answering a for 2 s
        w.run(a, a.tick(t + step * 100), t + step * 100)
    assert not a.nodes[c.node_id].failing
    t += 2000
    w.down.add(c)
    # a sees c PFAIL only now; b's report is older than 2*T: not counted.
    for step in range(1, 20):
        w.run(a, a.tick(t + step * 100), t + step * 100)
    assert a.nodes[c.node_id].flags & FLAG_PFAIL
    assert not a.nodes[c.node_id].flags & FLAG_FAIL


def three_with_c_down():
    """a, b, c joined, then c down for 6 s: a and b flag it FAIL."""
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    w.down.add(c)
    for step in range(1, 60):
        w.tick_all(t + step * 100)
    return a, b, c, w, t + 60 * 100


def test_three_nodes_one_dies_fail_is_reached_and_cleared_when_it_answers():
    a, b, c, w, t = three_with_c_down()
    for m in (a, b):
        assert m.nodes[c.node_id].flags & FLAG_FAIL, m.nodes_lines()
        assert c.node_id not in m.reachable_ids()
        assert dict((i, p) for i, _, _, p in m.hello_entries())[c.node_id] == 100
        assert "fail" in m.nodes_lines()[[l.split()[0] for l in m.nodes_lines()].index(c.node_id)]
    # c comes back: the next PONG clears FAIL everywhere.
    w.down.clear()
    for step in range(1, 20):
        w.tick_all(t + step * 100)
    for m in (a, b):
        assert not m.nodes[c.node_id].failing
        assert any(ev.node_id == c.node_id for ev in w.events(m, NODE_RECOVERED))


def test_a_restarted_node_is_cleared_by_its_first_ping_not_our_next_retransmission():
    # Issue 23: a peer we flag FAIL restarts and pings us. We ping it back at once
    # (its PONG clears the flag within the round trip), without waiting for our
    # retransmission (node_timeout/4) or link redial: a and b never tick here.
    a, b, c, w, t = three_with_c_down()
    saved = c.to_nodes_conf()
    assert all(m.nodes[c.node_id].flags & FLAG_FAIL for m in (a, b))
    c2 = Membership.from_nodes_conf(saved, ip="10.0.0.3", port=7711, bus_port=17711,
                                    rng=random.Random(33), node_timeout=T, now=t)
    w.members[2] = c2
    w.down.clear()
    w.run(c2, c2.tick(t + 10), t + 10)      # its first PINGs, nothing else
    for m in (a, b):
        assert not m.nodes[c.node_id].failing, m.nodes_lines()
        assert c.node_id in m.reachable_ids()
        assert any(ev.node_id == c.node_id for ev in w.events(m, NODE_RECOVERED))


def test_a_failing_node_that_talks_to_us_is_pinged_at_most_every_100_ms():
    a, b, c, w, t = three_with_c_down()
    assert a.nodes[c.node_id].flags & FLAG_FAIL

    def pings_to_c(now):
        # c talks to a, but what a sends to c is lost (a one-way partition).
        out = a.handle_message(Link(c.myself.ip, a.myself.ip), c.message(PING, a.node_id), now)
        return [o for o in out if isinstance(o, Send) and o.node_id == c.node_id
                and o.msg.type == PING]

    assert len(pings_to_c(t + 10)) == 1
    assert pings_to_c(t + 60) == []
    assert len(pings_to_c(t + 110)) == 1
    assert a.nodes[c.node_id].flags & FLAG_FAIL     # no PONG: still failing


def test_fail_message_is_accepted_from_known_nodes_only():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b)
    stranger = c.message(FAIL, b.node_id)
    a.handle_message(None, stranger, t)
    assert not a.nodes[b.node_id].flags & FLAG_FAIL
    # a known node's FAIL about ourselves is ignored too
    a.handle_message(None, b.message(FAIL, a.node_id), t)
    assert not a.myself.flags & FLAG_FAIL


def test_two_node_cluster_never_fails_the_other():
    a, b = make(1), make(2)
    w, t = join(a, b)
    w.down.add(b)
    for step in range(1, 100):
        w.tick_all(t + step * 100)
    assert a.nodes[b.node_id].flags & FLAG_PFAIL
    assert not a.nodes[b.node_id].flags & FLAG_FAIL      # 1 of 2 is no majority


def test_stale_link_is_dropped_for_reconnect():
    a, b = make(1), make(2)
    w, t = join(a, b)
    a.link_up(b.node_id, t)
    w.down.add(b)
    out = []
    for step in range(1, 30):
        out += a.tick(t + T + step * 100)
    assert any(isinstance(o, DropLink) and not o.forget and o.node_id == b.node_id for o in out)
    assert not a.nodes[b.node_id].link


def test_link_up_sends_a_ping_and_sets_priority():
    a, b = make(1), make(2)
    w, t = join(a, b)
    assert dict((i, p) for i, _, _, p in a.hello_entries())[b.node_id] == 5   # no link
    out = a.link_up(b.node_id, t)
    assert any(isinstance(o, Send) and o.msg.type == PING for o in out)
    assert dict((i, p) for i, _, _, p in a.hello_entries())[b.node_id] == 1
    assert a.nodes_lines()[1].endswith(" connected")
    a.link_down(b.node_id, t)
    assert a.nodes_lines()[1].endswith(" disconnected")


def test_a_new_id_at_a_known_address_marks_the_old_one_noaddr():
    a, b = make(1), make(2)
    w, t = join(a, b)
    old = b.node_id
    b.reset(hard=True, now=t)                      # RESET HARD: new id, same address
    assert b.node_id != old and len(b.nodes) == 1
    w.run(a, a.tick(t + T), t + T)                 # a pings "old" at that address
    assert a.nodes[old].flags & FLAG_NOADDR
    assert old not in a.reachable_ids()


# -- FORGET, RESET ---------------------------------------------------------------------------

def test_forget_blacklists_the_id_for_60_seconds():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    out = a.forget(c.node_id, t)
    assert c.node_id not in a.nodes
    assert any(isinstance(o, DropLink) and o.forget for o in out)
    assert any(isinstance(o, SaveConfig) and c.node_id not in o.text for o in out)
    assert [e.node_id for e in out if isinstance(e, NodeEvent) and e.kind == NODE_DELETED] == [c.node_id]
    # b keeps gossiping about c: a must not handshake it back during 60 s...
    for step in range(1, 50):
        w.tick_all(t + step * 1000)
        assert c.node_id not in a.nodes
        assert not any(n.flags & FLAG_HANDSHAKE for n in a.nodes.values())
    # ...and takes it back once the blacklist expired.
    for step in range(50, 75):
        w.tick_all(t + step * 1000)
    assert a.is_known(c.node_id)
    assert BLACKLIST_TTL == 60_000


def test_forget_errors():
    a, b = make(1), make(2)
    join(a, b)
    with pytest.raises(MembershipError, match="forget myself"):
        a.forget(a.node_id, 0)
    with pytest.raises(MembershipError, match="Unknown node"):
        a.forget("f" * 40, 0)


def test_reset_soft_and_hard():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    my = a.node_id
    out = a.reset(hard=False, now=t)
    assert a.known_ids() == [my]
    assert sum(isinstance(o, DropLink) for o in out) == 2
    w, t = join(a, b, c, now=t)
    out = a.reset(hard=True, new_id="b" * 40, now=t)
    assert a.node_id == "b" * 40 and a.known_ids() == ["b" * 40]
    assert any(isinstance(o, SaveConfig) and o.text.splitlines()[1].startswith("b" * 40)
               for o in out)


# -- queries ------------------------------------------------------------------------------------

def test_nodes_lines_cluster_info_and_hello():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    lines = a.nodes_lines()
    assert len(lines) == 3
    me = lines[0].split()
    assert me == [a.node_id, "10.0.0.1:7711", "myself", "0", "0", "connected"]
    other = lines[1].split()
    assert len(other) == 6 and other[2] == "noflags" and other[5] == "disconnected"
    assert int(other[4]) > 0
    info = a.cluster_info()
    assert info["cluster_state"] == "ok"
    assert info["cluster_known_nodes"] == 3
    assert info["cluster_reachable_nodes"] == 2
    assert info["cluster_size"] == 3
    assert info["cluster_stats_messages_sent"] > 0
    assert info["cluster_stats_messages_received"] > 0
    hello = a.hello_entries()
    assert hello[0] == (a.node_id, "10.0.0.1", 7711, 1)
    assert {h[0] for h in hello} == {a.node_id, b.node_id, c.node_id}
    assert sorted(a.reachable_ids()) == sorted([b.node_id, c.node_id])


def test_job_layer_messages_update_the_sender_only():
    a, b = make(1), make(2)
    w, t = join(a, b)
    before = a.stats_received
    out = a.handle_message(None, b.message(REPLJOB, {"id": "x"}), t)
    assert a.stats_received == before + 1
    assert not [o for o in out if isinstance(o, Send)]


# -- nodes.conf --------------------------------------------------------------------------------

def test_nodes_conf_round_trip():
    a, b, c, d = make(1), make(2), make(3), make(4)
    w, t = join(a, b, c, d)
    a.nodes[b.node_id].flags |= FLAG_FAIL
    a.nodes[c.node_id].flags |= FLAG_PFAIL         # not saved: re-measured at start
    a.set_leaving(True, t)
    text = a.to_nodes_conf()
    r = Membership.from_nodes_conf(text, ip="10.0.0.1", port=7711, bus_port=17711,
                                   rng=random.Random(9), node_timeout=T, now=t)
    assert r.node_id == a.node_id and r.leaving
    assert sorted(r.known_ids()) == sorted(a.known_ids())
    for nid, n in r.nodes.items():
        o = a.nodes[nid]
        assert (n.ip, n.port, n.bus_port) == (o.ip, o.port, o.bus_port)
    assert r.nodes[b.node_id].flags & FLAG_FAIL
    assert not r.nodes[c.node_id].flags & FLAG_PFAIL
    assert r.to_nodes_conf() == text.replace(" pfail", " noflags").replace(",pfail", "")


def test_restarted_node_rejoins_without_meet():
    a, b, c = make(1), make(2), make(3)
    w, t = join(a, b, c)
    saved = c.to_nodes_conf()
    w.down.add(c)
    c2 = Membership.from_nodes_conf(saved, ip="10.0.0.3", port=7711, bus_port=17711,
                                    rng=random.Random(33), node_timeout=T, now=t)
    w.members[2] = c2
    w.down.clear()
    for step in range(1, 10):
        w.tick_all(t + step * 100)
    assert c2.node_id == c.node_id
    for m in (a, b, c2):
        assert len(m.known_ids()) == 3 and not any(n.failing for n in m.nodes.values())


def test_empty_address_and_ipv6_round_trip():
    a = Membership("c" * 40, "", 7711, 17711, rng=random.Random(1))
    a.nodes["d" * 40] = type(a.myself)("d" * 40, "::1", 7712, 17712, 0, 0)
    r = Membership.from_nodes_conf(a.to_nodes_conf(), ip="", port=1, bus_port=2,
                                   rng=random.Random(1))
    assert r.myself.ip == "" and r.nodes["d" * 40].ip == "::1"
    assert r.nodes["d" * 40].bus_port == 17712


@pytest.mark.parametrize("text,match", [
    ("", "myself"),
    ("zz 1.2.3.4:1@2 myself\n", "line 1"),
    ("%s 1.2.3.4:1 myself\n" % ("a" * 40), "address"),
    ("%s 1.2.3.4:x@2 myself\n" % ("a" * 40), "line 1"),
    ("%s 1.2.3.4:1@2 bogus\n" % ("a" * 40), "unknown flag"),
    ("# c\n\n%s 1.2.3.4:1@2 noflags\n" % ("a" * 40), "myself"),
])
def test_bad_nodes_conf_is_refused(text, match):
    with pytest.raises(ValueError, match=match):
        Membership.from_nodes_conf(text, ip="1.2.3.4", port=1, bus_port=2,
                                   rng=random.Random(1))


def test_changes_request_a_save_and_quiet_ticks_do_not():
    a, b = make(1), make(2)
    w, t = join(a, b)
    quiet = a.tick(t + 10)
    assert not any(isinstance(o, SaveConfig) for o in quiet)
    assert any(isinstance(o, SaveConfig) for o in a.set_leaving(True, t))
    assert not any(isinstance(o, SaveConfig) for o in a.set_leaving(True, t))


def test_explicit_meet_overrides_the_forget_blacklist():
    a, b = make(1), make(2)
    w, t = join(a, b)
    a.forget(b.node_id, t)
    w.run(a, a.meet("10.0.0.2", 17711, t + 10), t + 10)
    assert a.is_known(b.node_id)


def test_a_job_layer_header_with_news_is_not_skipped():
    """Job-layer messages whose header says nothing new are handled without
    marking the reachable nodes stale; one whose header changes something
    (the sender leaving, its address) still changes the table."""
    a, b = make(1), make(2)
    w, t = join(a, b)
    assert a.reachable_sorted() == (b.node_id,)
    a.handle_message(None, b.message(REPLJOB, None), t + 1)
    assert a.nodes[b.node_id].data_received == t + 1
    assert a.reachable_sorted() == (b.node_id,)
    b.myself.flags |= FLAG_LEAVING
    out = a.handle_message(None, b.message(REPLJOB, None), t + 2)
    assert a.nodes[b.node_id].flags & FLAG_LEAVING
    assert a.reachable_sorted() == ()
    assert [o for o in out if isinstance(o, NodeEvent) and o.kind == "leaving"]
    b.myself.flags &= ~FLAG_LEAVING
    b.myself.ip = "10.0.0.42"
    a.handle_message(None, b.message(REPLJOB, None), t + 3)
    assert a.nodes[b.node_id].ip == "10.0.0.42"
    assert a.reachable_sorted() == (b.node_id,)
