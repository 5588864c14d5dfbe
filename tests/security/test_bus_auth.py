"""cluster-auth-pass (ext): only nodes that know the secret talk on the bus.

Real nodes, real sockets; the strangers are real nodes with no secret or
another one, and raw connections that write bus frames by hand (built with
protocol/bus.py, as a peer would), to inject, forge and replay them."""

from __future__ import annotations

import time

import pytest

from broker.job import make_job_id
from protocol import bus as B
from tests.harness import NodeProcess, RawConn, cluster_info, join, wait_until
from tests.security.security_kit import RawBus, Relay, fake_node_id

SECRET = "correct horse battery staple"
TIMEOUT = 1000          # cluster-node-timeout: handshakes that fail expire in 1 s


def nodes_text(n: NodeProcess) -> str:
    with RawConn(n.host, n.port) as r:
        reply = r.call("CLUSTER", "NODES")
    return reply.split(b"\r\n", 1)[1].decode().strip()


def real_nodes(n: NodeProcess) -> int:
    """Nodes ``n`` knows (itself included), handshakes not counted."""
    return int(cluster_info(n)["cluster_known_nodes"])


def call(n: NodeProcess, *args):
    return n.client().execute_command(*args)


def addjob(n: NodeProcess, repl: int, queue: str = "q") -> bytes:
    return call(n, "ADDJOB", queue, "payload", 5000, "REPLICATE", repl, "RETRY", 30)


def log_has(n: NodeProcess, text: str) -> bool:
    return text in n.log()


def job_fields(node_id: str, queue: bytes = b"q") -> list:
    """REPLJOB's payload for a new job (broker/job.py's job_to_fields layout)."""
    now = int(time.time() * 1000)
    jid = make_job_id(node_id, int.from_bytes(b"\x07" * 18, "big"), 60, 30)
    return [jid, queue, b"injected", 0, 0, 1, now + 60_000, now * 1_000_000, 0, 30, 0, 0,
            None, now + 30_000]


# ---------------------------------------------------------------------------


def test_nodes_sharing_the_secret_join_and_replicate(node_factory):
    a, b, c = node_factory.cluster(3, cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
    jid = addjob(a, 3)
    assert call(b, "SHOW", jid)[1] == jid and call(c, "SHOW", jid)[1] == jid
    assert a.client().config_get("cluster-auth-pass*") == {
        "cluster-auth-pass": SECRET, "cluster-auth-pass-previous": ""}


@pytest.mark.parametrize("stranger", ["no secret", "another secret"])
def test_a_node_without_the_secret_can_neither_meet_nor_be_met(node_factory, stranger):
    a = node_factory(cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
    extra = {} if stranger == "no secret" else {"cluster_auth_pass": "not " + SECRET}
    c = node_factory(cluster_node_timeout=TIMEOUT, **extra)
    assert call(c, "CLUSTER", "MEET", a.host, a.port) == b"OK"
    assert call(a, "CLUSTER", "MEET", c.host, c.port) == b"OK"
    wait_until(lambda: log_has(a, "Bus authentication failed"),
               message=lambda: a.log_tail())
    if stranger == "no secret":
        wait_until(lambda: log_has(c, "authenticates its bus links (cluster-auth-pass) "
                                      "and this node does not"), message=lambda: c.log_tail())
    else:
        wait_until(lambda: log_has(c, "the peer proved no cluster-auth-pass of this node"),
                   message=lambda: c.log_tail())
    # Neither learns the other: not now, nor once the handshakes gave up.
    assert real_nodes(a) == real_nodes(c) == 1
    wait_until(lambda: "handshake" not in nodes_text(a) + nodes_text(c))
    assert real_nodes(a) == real_nodes(c) == 1
    assert len(nodes_text(a).splitlines()) == 1


def test_frames_sent_without_the_handshake_are_refused_and_change_nothing(node_factory):
    a = node_factory(cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
    before = nodes_text(a)
    raw = RawBus(a.bus_port)
    assert raw.read_auth().kind == B.AUTH_HELLO      # the node opens with its challenge
    stranger, gossiped = fake_node_id(), fake_node_id()
    raw.send_message(B.BusMessage(
        B.MEET, stranger, "127.0.0.1", 7, 17, 0,
        [B.GossipEntry(gossiped, "127.0.0.1", 8, 18, 0, -1, 0)], None))
    raw.send_message(B.BusMessage(B.REPLJOB, stranger, "127.0.0.1", 7, 17, 0, [],
                                  job_fields(stranger)))
    assert raw.is_closed()
    wait_until(lambda: log_has(a, "sent a bus message without authenticating"))
    assert nodes_text(a) == before                      # not even a handshake entry
    assert call(a, "JSCAN", "BUSYLOOP")[1] == []
    assert call(a, "QLEN", "q") == 0


def test_a_wrong_or_missing_proof_gets_no_answer(node_factory):
    a = node_factory(cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
    wrong = RawBus(a.bus_port)
    with pytest.raises(ConnectionError):
        wrong.handshake(["guess"])          # the node closes instead of ACCEPT
    assert wrong.is_closed()
    # The right secret, as a positive control: the node accepts and its own
    # proof checks out (RawBus.handshake verifies it), then a signed PING from
    # an id it does not know gets a signed PONG back on the same link.
    right = RawBus(a.bus_port)
    assert right.handshake(["guess", SECRET]).index == 1
    me = fake_node_id()
    right.send_message(B.BusMessage(B.PING, me, "127.0.0.1", 1, 1, 0, [], None))
    pong = right.read_message()
    assert (pong.type, pong.sender) == (B.PONG, call(a, "CLUSTER", "MYID").decode())
    # A frame whose tag is not the link's (forged) closes it, unheard.
    frame = B.encode_frame(B.BusMessage(B.MEET, me, "127.0.0.1", 1, 1, 0, [], None))
    right.send(frame + b"\0" * B.AUTH_TAG_SIZE)
    assert right.is_closed()
    assert real_nodes(a) == 1 and "handshake" not in nodes_text(a)


def test_recorded_traffic_replayed_on_another_link_or_in_the_same_one_is_refused(
        node_factory):
    """A relay sits on the link from a to b (b announces the relay as its bus
    port) and records what a sends: the handshake and a REPLJOB. The job is
    then flushed from b. Replaying the recording on a new connection to b, or one
    recorded frame again inside the live link, brings nothing back."""
    b = node_factory(cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
    relay = Relay(b.bus_port)
    try:
        b_myid = call(b, "CLUSTER", "MYID").decode()
        assert call(b, "CONFIG", "SET", "cluster-announce-bus-port", relay.port) == b"OK"
        a = node_factory(cluster_auth_pass=SECRET, cluster_node_timeout=TIMEOUT)
        join([a, b])
        wait_until(lambda: relay.streams, message="a never dialled b through the relay")
        jid = addjob(a, 2)
        assert call(b, "SHOW", jid) is not None
        wait_until(lambda: any(jid in f for f in relay.frames(0)),
                   message="the REPLJOB did not go through the relay")
        repljob = next(f for f in relay.frames(0) if jid in f)
        recording = relay.recorded(0)
        # Gone from b without a trace (no tombstone): a REPLJOB getting through
        # would bring it back.
        assert call(b, "DEBUG", "FLUSHALL") == b"OK"
        assert call(b, "SHOW", jid) is None

        # 1. The whole recording on a fresh connection: b's challenge is new,
        # the recorded proof answers an old one.
        replay = RawBus(b.bus_port)
        replay.send(recording)
        assert replay.is_closed()
        wait_until(lambda: log_has(b, "the peer proved no cluster-auth-pass of this node"))
        assert call(b, "SHOW", jid) is None

        # 2. The REPLJOB frame again inside the live link: its number is old.
        relay.inject(0, repljob)
        wait_until(lambda: log_has(b, "fails its authentication tag"),
                   message=lambda: b.log_tail())
        assert call(b, "SHOW", jid) is None
        assert call(b, "JSCAN", "BUSYLOOP")[1] == []
        # a reconnects (through the relay again) and the cluster works on.
        wait_until(lambda: len(relay.streams) >= 2)
        wait_until(lambda: cluster_info(a)["cluster_reachable_nodes"] == "1")
        jid2 = addjob(a, 2)
        assert call(b, "SHOW", jid2)[1] == jid2
        assert b_myid in nodes_text(a)
    finally:
        relay.close()


def test_rotating_the_secret_with_config_set(node_factory):
    nodes = node_factory.cluster(3, cluster_auth_pass="old", cluster_node_timeout=TIMEOUT)
    a, b, c = nodes

    def reachable(n):
        return cluster_info(n)["cluster_reachable_nodes"]

    # a and b move to the new secret; each still accepts the old one, so c
    # (not rotated yet) stays in.
    for n in (a, b):
        assert call(n, "CONFIG", "SET", "cluster-auth-pass", "new") == b"OK"
        assert n.client().config_get("cluster-auth-pass*") == {
            "cluster-auth-pass": "new", "cluster-auth-pass-previous": "old"}
    assert call(a, "SHOW", addjob(a, 3))[7] == 3
    # Ending the rotation on a and b drops the links that proved the old
    # secret: a and b reconnect with the new one, c is cut off...
    for n in (a, b):
        assert call(n, "CONFIG", "SET", "cluster-auth-pass-previous", "") == b"OK"
    wait_until(lambda: log_has(c, "the peer proved no cluster-auth-pass of this node")
               or log_has(a, "the peer proved no cluster-auth-pass of this node"))
    wait_until(lambda: reachable(a) == reachable(b) == "1" and reachable(c) == "0",
               message=lambda: f"{cluster_info(a)} {cluster_info(c)}")
    assert call(a, "SHOW", addjob(a, 2))[7] == 2
    # ... until it takes the new secret too.
    assert call(c, "CONFIG", "SET", "cluster-auth-pass", "new") == b"OK"
    wait_until(lambda: all(reachable(n) == "2" for n in nodes))
    assert call(c, "SHOW", addjob(c, 3))[7] == 3


def test_authentication_turned_on_at_run_time(node_factory):
    a, b = node_factory.cluster(2, cluster_node_timeout=TIMEOUT)
    for n in (a, b):
        assert call(n, "CONFIG", "SET", "cluster-auth-pass", SECRET) == b"OK"
    # Every link was re-opened and authenticated: a raw peer without the
    # handshake is now refused, and the two nodes still replicate.
    raw = RawBus(a.bus_port)
    assert raw.read_auth().kind == B.AUTH_HELLO
    wait_until(lambda: cluster_info(a)["cluster_reachable_nodes"] == "1")
    jid = addjob(a, 2)
    assert call(b, "SHOW", jid)[1] == jid
    raw.close()
