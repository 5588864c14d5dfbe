"""A whole broker node (server/sim/inprocess.py: Node + Cluster + the output
driver, composed as the process's: server/compose.py) as a simulator node
(server/sim/simulation.py).

The simulator drives anything with ``node_id``, ``handle_message``, ``tick`` and
optionally ``next_deadline``/``link_up``/``link_down``, each returning the
outputs it routes (Send by address, DropLink, NodeEvent for the trace). Here the
output driver does the work the process does (records to the host's simulated
disk first, through the server's AOF writer, then replies, then bus messages)
and its bus is this adapter, which hands the messages to the simulator. The
writer's timers (its cron, its rewrite's slices) are the simulation's events;
where it would exit the process, the simulator crashes the host (``exited``). Scenarios run client commands
(``command``) whose replies, immediate or later (blocked GETJOB, sync ADDJOB),
go to a callback.

Checked on every message the node sends (``sim.violations``, by the checker's
``unlogged_copies``): a GOTJOB never confirms a copy the node has not logged,
when it logs (appendonly yes).
"""

from __future__ import annotations

import random

from broker.config import Config
from cluster.outputs import DropLink, Send
from server.clock import SteadyClock
from server.sim.checker import unlogged_copies
from server.sim.clock import Timer, VirtualClock
from server.sim.inprocess import InProcessNode, ProcessExit, Replies


class BrokerSimNode(InProcessNode):
    def __init__(self, host, saved: str | None, rng: random.Random, now: int,
                 config: Config) -> None:
        self.host = host
        self.sim = host.sim
        self.incarnation = host.incarnation
        self.out: list = []
        self.exited = False             # the process exited (the simulator crashes the host)
        # The host's clock may be made to jump (Simulation.jump_clock): the node
        # reads it through the process's rule (server/clock.py).
        self.steady = SteadyClock(now)
        super().__init__(config, clock=VirtualClock(now), rng=rng, saved_nodes_conf=saved,
                         address=(host.ip, host.port, host.bus_port), bus=self,
                         disk=host.disk, on_event=self.out.append)
        if saved is None:
            host.saved = self.cluster.m.to_nodes_conf()     # a first start saves its new id

    @property
    def node_id(self) -> str:
        return self.cluster.m.node_id

    # -- the driver's bus: messages go back to the simulator ---------------------
    def send_output(self, out: Send) -> None:
        aof = self.driver.aof
        if aof is not None and self.sim is not None:
            # Logged: in the file; fsynced, when the policy fsyncs before replies.
            synced_only = aof.policy.fsync_before_replies(aof.rewrite is not None)
            disk, path = self.host.disk, aof.path
            for jid in unlogged_copies(out.msg, self.node, self.clock.now,
                                       lambda jid: disk.holds(jid, synced_only, path)):
                self.sim.violations.append(
                    f"{self.host.name} confirmed a copy of {jid!r} it has not logged")
        self.out.append(out)

    def drop_link(self, node_id, forget) -> None:
        self.out.append(DropLink(node_id, forget))

    def _save_nodes_conf(self, text: str) -> None:
        self.host.saved = text

    def _outputs(self) -> list:
        out, self.out = self.out, []
        return out

    def _input(self, fn, *args) -> list:
        """Run one input; its outputs for the simulator. A process exit (a failed
        write under appendfsync always) loses them: the simulator then crashes
        the host."""
        try:
            fn(*args)
        except ProcessExit:
            self.exited = True
            self.out = []
            return []
        return self._outputs()

    def post_timer(self, delay_ms: int, timer: Timer) -> None:
        """The AOF writer's timers: events of the simulation, for this
        incarnation of the host's process."""
        host = self.host

        def due(sim) -> None:
            if host.alive and host.incarnation == self.incarnation and not timer.cancelled:
                sim.call(host.name, lambda node, now: node.run_timer(timer, now))

        self.sim.at(self.sim.now + delay_ms, due)

    def run_timer(self, timer: Timer, now: int) -> list:
        self._read(now)
        return self._input(timer.run)

    # -- what the simulator calls -------------------------------------------------
    def _read(self, now: int) -> int:
        """The host's clock reading -> the node's time."""
        self.clock.now = self.steady.read(now)
        return self.clock.now

    def handle_message(self, link, msg, now: int) -> list:
        now = self._read(now)
        return self._input(self.driver.bus_message, link, msg, now)

    def tick(self, now: int) -> list:
        self._read(now)
        return self._input(self.driver.tick)

    def next_deadline(self, now: int):
        # in the host's clock, which the simulator schedules by
        return self.node.next_deadline() - self._read(now) + now

    def link_up(self, node_id: str, now: int) -> list:
        now = self._read(now)
        return self._input(self.driver.link_up, node_id, now)

    def link_down(self, node_id: str, now: int) -> list:
        now = self._read(now)
        return self._input(self.driver.link_down, node_id, now)

    # -- what scenarios call --------------------------------------------------------
    def new_client(self, on_reply):
        return super().new_client(Replies(on_reply), addr="sim")

    def command(self, client, args, now: int) -> list:
        """Run a client command; its reply goes to the client's callback (now, or
        later for a blocked command). Returns the outputs for the simulator."""
        self._read(now)
        return self._input(self.run, client,
                           [a if isinstance(a, bytes) else str(a).encode() for a in args])


def broker_factory(**directives):
    """Simulator factory: each start builds a broker node from these directives
    (names with '_' for '-'), reloading the saved nodes.conf (and, with
    appendonly yes, the disk) on restart."""

    def make(host, saved, rng, now):
        config = Config()
        for name, value in directives.items():
            config.set(name.replace("_", "-"), str(value), at_runtime=False)
        return BrokerSimNode(host, saved, rng, now, config)

    return make
