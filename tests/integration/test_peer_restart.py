"""Issue 23: a peer killed, restarted, then killed again before the others notice.

Disque keeps such a peer reachable (it answered since its restart, and it is not
PFAIL yet), so a sync ADDJOB asking for every node waits for it and succeeds once
it is back. The others must clear the peer's FAIL flag as soon as it talks to
them after its restart (Disque redials it within its 100 ms cron), not at their
next ping retransmission or link redial, or that ADDJOB gets -NOREPL at once.
"""

from __future__ import annotations

from tests.harness import NODE_WAIT_MS, RawConn, encode_command
from tests.integration.cluster_kit import JOB_ID_RE, Cluster, nodes_table, show, wait

# Long enough that the others' ping retransmission (node_timeout/4) is unlikely
# to clear the flag by chance in the short window the test leaves, and that
# the ADDJOB reaches a node before it flags the peer killed again PFAIL (a
# node timeout later), however slow the machine.
NODE_TIMEOUT_MS = 6000


def test_sync_addjob_waits_for_a_peer_killed_again_right_after_its_restart(node_factory):
    c = Cluster(node_factory, 3, cluster_node_timeout=NODE_TIMEOUT_MS)
    a, b, peer = c
    peer_id = c.ids[2]
    peer.kill()
    wait(lambda: all("fail" in nodes_table(n)[peer_id]["flags"] for n in (a, b)),
         message="the killed peer was not flagged FAIL")
    peer.start()
    # Restarted from its nodes.conf, it pings both others: once it has their
    # PONGs it has spoken to them, and they must count it reachable again.
    wait(lambda: all(nodes_table(peer)[i]["pong_recv"] for i in c.ids[:2]),
         message="the restarted peer got no PONG")
    peer.kill()
    with RawConn(a.host, a.port) as r:
        # It waits for the peer's start, however long that takes.
        r.send(encode_command("ADDJOB", "q", "body", NODE_WAIT_MS, "REPLICATE", 3))
        peer.start()
        reply = r.read_reply()
    assert reply.startswith(b"+"), reply
    jid = reply[1:-2]
    assert JOB_ID_RE.match(jid), reply
    assert show(peer, jid) is not None
