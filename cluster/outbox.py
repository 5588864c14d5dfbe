# compiled: mypyc (setup.py builds each module whose first line this is)
"""The cluster layer's outputs until the driver takes them (``drain``): the
membership's (Send, DropLink, SaveConfig, NodeEvent) as they come, and the
job layer's messages, batched per peer.

Job-layer messages are not turned into Sends one by one: ``send``/``send_many``
queue (type, payload) per destination and ``drain`` makes one Send per node out
of them (a BATCH message when there are several), so a shell that drains once per
event-loop turn sends one frame per peer per turn however many jobs that turn
replicated, acked or requeued. ``has_output`` tells whether a drain is due.

Below every sub-protocol (replication, acks, requeue, federation): each is
given the node's Outbox and sends through it.
"""

from __future__ import annotations

from typing import Iterable

from broker.job import Job
from cluster.membership import ClusterNode, Membership
from cluster.outputs import Send
from protocol import bus as B


def _same_items(a: list, b: list) -> bool:
    """Two batches of the same messages: the same payload objects, in order (as
    send_many queues one payload for several nodes)."""
    if len(a) != len(b):
        return False
    for i in range(len(a)):
        if a[i] is not b[i]:
            return False
    return True


class Outbox:
    """Owns ``out`` (the outputs not drained yet, in order) and ``batches``
    (job-layer messages not drained yet: node id -> [type, payload, type, ...],
    the flat layout of a BATCH payload, in the order they were sent)."""

    def __init__(self, membership: Membership) -> None:
        self.m = membership
        # The membership's node table: the same dict for the membership's
        # whole life (RESET HARD renames our entry, it does not replace the
        # table), held here so that every message sent does not look it up.
        self.nodes: dict[str, ClusterNode] = membership.nodes
        self.out: list = []
        self.batches: dict[str, list] = {}

    @property
    def has_output(self) -> bool:
        return bool(self.out or self.batches)

    def drain(self) -> list:
        if self.batches:
            self._flush_batches()
        out, self.out = self.out, []
        return out

    def _flush_batches(self) -> None:
        # The address is read now, not when the message was queued: a node deleted
        # since then gets nothing (the membership already closed its link), one that
        # moved gets it at its new address.
        nodes = self.nodes
        m = self.m     # m.message(...) is a native call; a bound method's is not
        out = self.out
        # Destinations queued the same messages (a REPLJOB to every copy's holder)
        # share one message object, which the shell encodes once.
        made: list[tuple[list, B.BusMessage]] = []
        for nid, items in self.batches.items():
            n = nodes.get(nid)
            if n is None or not n.ip:
                continue
            msg = None
            for other, earlier in made:
                if _same_items(items, other):
                    msg = earlier
                    break
            if msg is None:
                if len(items) == 2:
                    msg = m.message(items[0], items[1])
                else:
                    msg = m.message(B.BATCH, items)
                made.append((items, msg))
            out.append(Send(nid, n.ip, n.bus_port, msg, n.bus_version))
        self.batches = {}

    def send(self, node_id: str, mtype: int, payload: object) -> None:
        n = self.nodes.get(node_id)
        if n is None or not n.ip:
            return
        self.m.stats_sent += 1
        b = self.batches.get(node_id)
        if b is None:
            self.batches[node_id] = [mtype, payload]
        else:
            b.append(mtype)
            b.append(payload)

    def send_many(self, node_ids: Iterable[str], mtype: int, payload: object) -> None:
        """The same message to several nodes (the payload object is shared)."""
        nodes = self.nodes
        batches = self.batches
        me = self.m.node_id
        sent = 0
        for nid in node_ids:
            n = nodes.get(nid)
            if n is None or not n.ip or nid == me:
                continue
            sent += 1
            b = batches.get(nid)
            if b is None:
                batches[nid] = [mtype, payload]
            else:
                b.append(mtype)
                b.append(payload)
        self.m.stats_sent += sent

    def others_of(self, job: Job) -> list[str]:
        """The other nodes that may hold a copy of job: where its messages go."""
        nd = job.nodes_delivered
        if not nd:
            return []
        me = self.m.node_id
        return [n for n in nd if n != me]     # sorted, as nd is: simulations replay exactly
