# compiled: mypyc (setup.py builds each module whose first line this is)
"""The output driver: the one place that carries a node's outputs out, in the
order persistence needs. Used by the process (server/process.py, with its RESP
shell and the cluster bus), by in-process nodes (server/sim/inprocess.py: fast
tests, the simulator) and by any future shell (HTTP...).

The core's outputs (DESIGN.md) are:
- replies: the value handle_command returns (the shell encodes and writes it)
  and, for other clients, ``node.outbox``: ``(client, reply)`` pairs, handed to
  ``client.conn.deliver(reply)``; ``conn`` is whatever object the shell attached
  to the client (a RESP connection, an HTTP request waiting, a test's list);
- AOF records: ``node.records`` (broker/records.py), given to the AOF writer;
- bus messages and membership effects: ``cluster.outbox.drain()`` (Send,
  DropLink, SaveConfig, NodeEvent; cluster/outbox.py);
- deadlines: ``node.next_deadline()``, when ``tick`` is due.

The rule that makes persistence an output: a reply or a bus message produced by
an input leaves only after the records produced by the same input were written
(and fsynced under ``appendfsync always``): replies are held (``hold``) while
records wait, and ``flush`` writes the records first, then releases the held
replies, then sends the bus messages (a GOTJOB never confirms a copy not logged).

How a shell uses it, for each input (a client command, a bus message, a link
change, the timer): call the core (``node.handle_command`` and friends, or
``driver.tick`` / ``driver.bus_message`` ...), write immediate replies through
``write_reply`` (it holds them when needed), then call ``after_input``. The
driver asks for ``flush`` through ``wake`` (the process: once per event-loop
turn; without ``wake`` it flushes at once).
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from broker.node import Node
from cluster.cluster import Cluster
from cluster.outputs import DropLink, NodeEvent, SaveConfig, Send
from protocol.bus import (
    BATCH, DEFAULT_MAX_FRAME_SIZE, BusCodec, BusMessage, BusProtocolError, unbatch,
)

log = logging.getLogger("server.driver")


class OutputDriver:
    def __init__(self, node: Node, cluster: Cluster, *, bus: Any = None, encode: bool = True,
                 aof: Any = None, wake: Callable[[], None] | None = None,
                 arm_timer: Callable[[int], None] | None = None,
                 save_nodes_conf: Callable[[str], None] | None = None,
                 on_event: Callable[[NodeEvent], None] | None = None) -> None:
        """``bus``: ``send(node_id, ip, bus_port, frame)`` and
        ``drop_link(node_id, forget)`` (optionally ``cork``/``uncork``);
        ``encode``: give the bus encoded frames (False: the Send outputs
        themselves, ``bus.send_output(send)``: in-process nodes, the simulator); ``aof``: the writer (``append(records)``, ``flush()``,
        ``pending``), set later with ``set_aof``; ``wake()``: have ``flush``
        called soon; ``arm_timer(deadline_ms)``: have the timer input come then;
        ``save_nodes_conf(text)``; ``on_event(NodeEvent)``."""
        self.node = node
        self.cluster = cluster
        self.outbox = cluster.outbox        # its outputs, drained here
        self.bus = bus
        self.encode = encode
        self.codec = BusCodec()         # what it encodes (its headers packed once)
        self.aof: Any = None
        self.wake = wake
        self.arm_timer = arm_timer
        self.save_nodes_conf = save_nodes_conf
        self.on_event = on_event
        self.held: list[tuple[Any, Any]] = []       # (conn, data) replies waiting for records
        self.flush_requested = False
        self.timer_at: int | None = None
        if aof is not None:
            self.set_aof(aof)

    # -------------------------------------------------------------- persistence
    def set_aof(self, aof: Any) -> None:
        """Attach (or, with None, detach) the AOF writer: records are produced
        while one is attached."""
        if aof is None and self.aof is not None:
            self.flush()
        self.aof = aof
        self.node.persist = aof is not None
        self.node.persist_history = aof is not None and self.node.config.aof_history
        if aof is None:
            self.node.records.clear()
            self.node.aof_error = None

    # ------------------------------------------------------------------- replies
    def write_reply(self, conn: Any, data: Any) -> None:
        """An encoded reply for ``conn`` (``conn.write_now(data)`` sends it):
        now, or after this turn's records are written."""
        if self.aof is not None and (self.held or self.node.records or self.aof.pending):
            self.held.append((conn, data))
            self._request_flush()
        else:
            conn.write_now(data)

    def deliver_outbox(self) -> None:
        node = self.node
        while node.outbox:
            outbox, node.outbox = node.outbox, []
            for client, reply in outbox:
                conn = client.conn
                if conn is not None:
                    conn.deliver(reply)

    # -------------------------------------------------------------------- inputs
    def tick(self) -> None:
        """The timer input."""
        self.timer_at = None
        self._input("tick", self.node.tick)

    def bus_message(self, link: Any, msg: BusMessage, now: int) -> None:
        # _input's work, without formatting what it names per message.
        try:
            self.cluster.handle_message(link, msg, now)
        except Exception as e:          # our bug: the node decides (raise or count)
            self.node.internal_error(e, "bus message %s" % msg.type_name)
        self.after_input()

    def link_up(self, node_id: str, now: int) -> None:
        self._input("link up", self.cluster.link_up, node_id, now)

    def link_down(self, node_id: str, now: int) -> None:
        self._input("link down", self.cluster.link_down, node_id, now)

    def _input(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:          # our bug: the node decides (raise or count)
            self.node.internal_error(e, what)
        self.after_input()

    def after_input(self) -> None:
        """After any input: replies for other clients, a flush if records or bus
        messages wait, the timer re-armed."""
        if self.node.outbox:
            self.deliver_outbox()
        if self.node.records or self.held or self.outbox.has_output:
            self._request_flush()
        if self.arm_timer is not None:
            deadline = self.node.next_deadline()
            if self.timer_at is None or deadline < self.timer_at:
                self.timer_at = deadline
                self.arm_timer(deadline)

    def _request_flush(self) -> None:
        if self.wake is None:
            self.flush()
        elif not self.flush_requested:
            self.flush_requested = True
            self.wake()

    # --------------------------------------------------------------------- flush
    def flush(self) -> None:
        """Records first (written, fsynced per policy), then the replies held
        for them, then the bus messages."""
        self.flush_requested = False
        node = self.node
        aof = self.aof
        if aof is not None:
            if node.records:
                aof.append(node.take_records())
            aof.flush()
        held = self.held
        if held:
            self.held = []
            for conn, data in held:
                conn.write_now(data)
        if node.outbox:         # delivered while records waited: nothing holds them now
            self.deliver_outbox()
        if self.outbox.has_output:
            self.send_cluster_outputs(self.outbox.drain())

    def send_cluster_outputs(self, outputs: list) -> None:
        if not self.encode:
            self._apply(outputs)
            return
        bus = self.bus
        cork = getattr(bus, "cork", None)
        if cork is not None:
            cork()
        try:
            self._apply(outputs)
        finally:
            if cork is not None:
                bus.uncork()

    def _apply(self, outputs: list) -> None:
        frames: dict[tuple[int, int], bytes] = {}   # a broadcast, once per version
        bus = self.bus
        # The bus's frame size limit (the process's follows proto-max-bulk-len).
        limit = getattr(bus, "max_frame_size", DEFAULT_MAX_FRAME_SIZE)
        for out in outputs:
            if isinstance(out, Send):
                if bus is None:
                    continue
                if not self.encode:
                    bus.send_output(out)        # the Send itself (in-process, simulator)
                    continue
                key = (id(out.msg), out.version)
                frame = frames.get(key)
                if frame is None:
                    try:
                        frame = frames[key] = self.codec.encode_frame(out.msg, limit,
                                                                      out.version)
                    except BusProtocolError as e:
                        if out.msg.type == BATCH:
                            # Too big for one frame: one frame per message.
                            self._apply([Send(out.node_id, out.ip, out.bus_port, m, out.version)
                                         for m in unbatch(out.msg)])
                            continue
                        log.warning("Not sending %s: %s", out.msg.type_name, e)
                        continue
                bus.send(out.node_id, out.ip, out.bus_port, frame)
            elif isinstance(out, DropLink):
                if bus is not None:
                    bus.drop_link(out.node_id, out.forget)
            elif isinstance(out, SaveConfig):
                if self.save_nodes_conf is not None:
                    self.save_nodes_conf(out.text)
            elif isinstance(out, NodeEvent):
                if self.on_event is not None:
                    self.on_event(out)
