"""cluster-seeds (ext): nodes that find each other with no CLUSTER MEET typed.

Every node gets the same ``host:port`` list (client ports, as CLUSTER MEET
takes them; bus port = port + 10000 unless ``@bus-port`` is given). At start,
then every SEED_INTERVAL seconds while the node is alone (no other node
answers it: just started, or every peer failed), the names are resolved again
(DNS may change: a Kubernetes pod that restarts gets a new IP under the same
name) and every address is met, as CLUSTER MEET would. What a MEET means is
the membership's business (cluster/membership.py): a seed that is this node
itself is recognised when its own MEET comes back, and a node already known
under an old address takes the address it answers from. A name that does not
resolve is skipped (and logged once, until it resolves again).
"""

from __future__ import annotations

import asyncio
import logging
import socket

from cluster.membership import MembershipError

__all__ = ["Seeder", "SEED_INTERVAL"]

log = logging.getLogger("server.seeds")

SEED_INTERVAL = 2.0
BUS_PORT_OFFSET = 10000


class Seeder:
    def __init__(self, server) -> None:
        self.server = server
        self.task: asyncio.Task | None = None
        self.unresolved: set[str] = set()     # names whose failure was logged

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def run(self) -> None:
        while True:
            seeds = self.server.config.cluster_seeds
            if seeds and self.server.cluster.m.alone():
                await self.seed(seeds)
            await asyncio.sleep(SEED_INTERVAL)

    async def seed(self, seeds) -> None:
        """Resolve every seed and MEET each address (one round)."""
        loop = asyncio.get_running_loop()
        addresses = []
        for seed in seeds:
            try:
                infos = await loop.getaddrinfo(seed.host, seed.port, type=socket.SOCK_STREAM)
            except OSError as e:
                if seed.host not in self.unresolved:
                    self.unresolved.add(seed.host)
                    log.info("cluster-seeds: cannot resolve %s: %s", seed.host, e)
                continue
            self.unresolved.discard(seed.host)
            bus_port = seed.bus_port or seed.port + BUS_PORT_OFFSET
            for ip in dict.fromkeys(info[4][0] for info in infos):
                if not self.is_myself(ip, bus_port):
                    addresses.append((ip, bus_port))
        cluster = self.server.cluster
        if not cluster.m.alone():       # joined while we resolved
            return
        now = self.server.clock()
        for ip, bus_port in addresses:
            try:
                cluster.meet(ip, bus_port, now)
            except MembershipError as e:
                log.debug("cluster-seeds: %s", e)
        if addresses:
            log.debug("cluster-seeds: met %s", ", ".join(f"{a}:{p}" for a, p in addresses))
        self.server.driver.after_input()

    def is_myself(self, ip: str, bus_port: int) -> bool:
        # The obvious cases only; any other address of ours is recognised by
        # the membership when the MEET comes back to us.
        cfg = self.server.config
        me = self.server.cluster.m.myself
        return bus_port in (cfg.effective_bus_port, me.bus_port) and (
            ip == me.ip or ip in cfg.bind)
