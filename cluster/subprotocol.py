# compiled: mypyc (setup.py builds each module whose first line this is)
"""What each of the job layer's sub-protocols (replication, acks, requeue,
federation) works with: the node whose jobs it changes, the node table, the
outbox it sends through and the tombstones it checks, given by Cluster
(cluster/cluster.py), which composes them. Below every sub-protocol."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from broker.node import Node
from cluster.membership import Membership
from cluster.outbox import Outbox
from cluster.tombstones import Tombstones


@mypyc_attr(allow_interpreted_subclasses=True)   # Federation is interpreted (not in setup.py)
class SubProtocol:
    """Owns nothing: each subclass owns its own state (its docstring says
    what)."""

    def __init__(self, broker: Node, membership: Membership, outbox: Outbox,
                 tombstones: Tombstones) -> None:
        self.broker = broker
        self.m = membership
        self.outbox = outbox
        self.tombstones = tombstones
