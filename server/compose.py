"""How a node is put together: the one composition of Node + Cluster + output
driver, used by the process (server/process.py), the in-process node
(server/sim/inprocess.py) and the simulator's broker node
(server/sim/broker_node.py).
Each brings its own clock, randomness, host effects, bus and disk; what they
get is the same node, with the same command table (rename-command applied).
"""

from __future__ import annotations

from typing import NamedTuple

from broker.commands import COMMANDS, renamed
from broker.config import Config
from broker.node import Host, Node
from cluster.cluster import Cluster, announced_address
from cluster.membership import Membership
from server.driver import OutputDriver


class Composed(NamedTuple):
    node: Node
    cluster: Cluster
    driver: OutputDriver


def command_table(config: Config) -> dict:
    """The command table with the config's rename-command lines applied;
    ConfigError (Redis' fatal config error) for a line it refuses."""
    try:
        return renamed(COMMANDS, config.rename_commands)
    except ValueError as e:
        reason, line = e.args
        raise config.rename_error(line, reason) from None


def compose_node(config: Config, *, clock, rng, host: Host | None = None,
                 saved_nodes_conf: str | None = None, address=None,
                 membership: Membership | None = None, bus=None, encode: bool = True,
                 wake=None, arm_timer=None, save_nodes_conf=None, on_event=None,
                 perf_ns=None, strict: bool = False) -> Composed:
    """A node from its config and what runs it.

    ``clock``: () -> int ms; ``rng``: a random.Random; ``host``: the effects
    the core asks for (broker/node.py Host); ``saved_nodes_conf``: the text
    of cluster-config-file, or None at first start; ``address``: (ip, port,
    bus port) to announce, by default the config's (announce directives,
    bind); ``membership``: a node table the caller already built, instead of
    the saved text (tests on a real bus). The rest goes to the output driver
    (server/driver.py): ``bus``, ``encode``, ``wake``, ``arm_timer``,
    ``save_nodes_conf(text)``, ``on_event``; the AOF writer is attached later
    (``driver.set_aof``), once the node is loaded."""
    commands = command_table(config)
    if membership is None:
        ip, port, bus_port = address or announced_address(config)
        membership = Membership.bootstrap(saved_nodes_conf, ip=ip, port=port, bus_port=bus_port,
                                          rng=rng, node_timeout=config.cluster_node_timeout,
                                          now=clock())
    node = Node(config, clock, rng, host, node_id=membership.node_id, perf_ns=perf_ns,
                commands=commands, strict=strict)
    cluster = Cluster(node, membership)
    driver = OutputDriver(node, cluster, bus=bus, encode=encode, wake=wake,
                          arm_timer=arm_timer, save_nodes_conf=save_nodes_conf,
                          on_event=on_event)
    return Composed(node, cluster, driver)
