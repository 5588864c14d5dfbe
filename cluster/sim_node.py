"""A whole broker node (Node + Cluster + Membership) as a simulator node.

cluster/sim.py drives anything with ``node_id``, ``handle_message``, ``tick`` and
optionally ``next_deadline``/``link_up``/``link_down``; this adapter gives it the
real broker, with its clock set by the simulator before every input, and lets
scenarios run client commands (``command``) whose replies, immediate or later
(blocked GETJOB, sync ADDJOB), go to a callback.
"""

from __future__ import annotations

import random

from broker.config import Config
from broker.node import BLOCKED, Node
from cluster.cluster import Cluster
from cluster.membership import Membership, random_node_id


class BrokerSimNode:
    def __init__(self, host, saved: str | None, rng: random.Random, now: int,
                 config: Config) -> None:
        self.now = now
        if saved is not None:
            m = Membership.from_nodes_conf(saved, ip=host.ip, port=host.port,
                                           bus_port=host.bus_port, rng=rng,
                                           node_timeout=config.cluster_node_timeout, now=now)
        else:
            m = Membership(random_node_id(rng), host.ip, host.port, host.bus_port,
                           node_timeout=config.cluster_node_timeout, rng=rng, now=now)
            host.saved = m.to_nodes_conf()
        self.node = Node(config, self._clock, rng, node_id=m.node_id)
        self.cluster = Cluster(self.node, m)
        self.callbacks: dict[int, object] = {}   # client id -> fn(reply)

    def _clock(self) -> int:
        return self.now

    @property
    def node_id(self) -> str:
        return self.cluster.m.node_id

    def _outputs(self) -> list:
        node = self.node
        while node.outbox:
            outbox, node.outbox = node.outbox, []
            for client, reply in outbox:
                cb = self.callbacks.get(client.id)
                if cb is not None:
                    cb(reply)
        return self.cluster.drain()

    # -- what the simulator calls -------------------------------------------------
    def handle_message(self, link, msg, now: int) -> list:
        self.now = now
        self.cluster.handle_message(link, msg, now)
        return self._outputs()

    def tick(self, now: int) -> list:
        self.now = now
        self.node.tick()
        return self._outputs()

    def next_deadline(self, now: int):
        self.now = now
        return self.node.next_deadline()

    def link_up(self, node_id: str, now: int) -> list:
        self.now = now
        self.cluster.link_up(node_id, now)
        return self._outputs()

    def link_down(self, node_id: str, now: int) -> list:
        self.now = now
        self.cluster.link_down(node_id, now)
        return self._outputs()

    # -- what scenarios call --------------------------------------------------------
    def new_client(self, on_reply):
        client = self.node.new_client(addr="sim")
        self.callbacks[client.id] = on_reply
        return client

    def command(self, client, args, now: int) -> list:
        """Run a client command; its reply goes to the client's callback (now, or
        later for a blocked command). Returns the outputs for the simulator."""
        self.now = now
        argv = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        reply = self.node.handle_command(client, argv)
        if reply is not BLOCKED:
            self.callbacks[client.id](reply)
        return self._outputs()


def broker_factory(**directives):
    """Simulator factory: each start builds a broker node from these directives
    (names with '_' for '-'), reloading the saved nodes.conf on restart."""

    def make(host, saved, rng, now):
        config = Config()
        for name, value in directives.items():
            config.set(name.replace("_", "-"), str(value), at_runtime=False)
        return BrokerSimNode(host, saved, rng, now, config)

    return make
