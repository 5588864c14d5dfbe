"""The cluster bus: asyncio shell that carries bus frames between nodes.

SPEC.md §8: "Full mesh over the bus." This module only moves bytes; what to send and
what a message means is decided by the sans-IO core (cluster/membership.py and,
later, the job layer). It provides:

* :class:`ClusterBus` - a listener on the bus port plus one outbound link per peer
  node id (connect on first send, reconnect with backoff while the peer is wanted).
  Inbound connections are identified by the sender id in the message header, so a
  reply can go back on the inbound link while the outbound one is not connected
  (that is how a PONG reaches a node we do not know yet). Writes are coalesced:
  frames queued for one connection during an event-loop turn go out in one
  ``transport.write`` (at once on :meth:`ClusterBus.uncork` for a caller that
  batches per turn itself). A frame that does not parse (``BusProtocolError``) closes
  only that connection.

What the messages mean is the core's business; what to send comes out of the
output driver (server/driver.py), which calls :meth:`ClusterBus.send`.

Addresses: the bus listens on ``host``/``port``; what peers are told (the header
of every message) is the Membership's own ip/port/bus_port, i.e. the
``cluster-announce-ip``/``-port``/``-bus-port`` when set (SPEC §1), so a node can
sit behind NAT, a proxy or a container port map.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Callable

from cluster.membership import Link
from protocol.bus import (
    DEFAULT_MAX_FRAME_SIZE, BusMessage, BusProtocolError, FrameReader, encode_frame,
)

__all__ = ["ClusterBus"]

log = logging.getLogger(__name__)


class _Conn(asyncio.Protocol):
    """One TCP connection, either direction: frame reader + coalescing writer."""

    def __init__(self, bus: "ClusterBus", peer: "_Peer | None") -> None:
        self.bus = bus
        self.peer = peer                 # outbound: the peer we dialled
        self.node_id = peer.node_id if peer is not None else None
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(bus.max_frame_size)
        self.link = Link()
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.flush_scheduled = False
        self.closed = False

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        peername = transport.get_extra_info("peername") or ("",)
        sockname = transport.get_extra_info("sockname") or ("",)
        self.link = Link(peername[0], sockname[0],
                         self.peer.node_id if self.peer is not None else None)
        if self.peer is None:
            self.bus._inbound_conns.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
            for msg in self.reader:
                if self.peer is None and msg.sender != self.node_id:
                    # Inbound links are known by the sender id in the header.
                    self.bus._identify(self, msg.sender)
                self.bus._dispatch(self.link, msg)
                if self.closed:
                    return
        except BusProtocolError as exc:
            log.warning("Bus protocol error from %s (node %s): %s; closing the link",
                        self.link.peer_ip, self.node_id or "?", exc)
            self.abort()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.transport = None
        self.bus._conn_lost(self)

    # -- writing -----------------------------------------------------------------------

    def write(self, frame: bytes) -> None:
        if self.closed:
            return
        self.pending.append(frame)
        self.pending_bytes += len(frame)
        if not self.flush_scheduled:
            self.flush_scheduled = True
            corked = self.bus._corked
            if corked is not None:
                corked.append(self)      # written by ClusterBus.uncork
            else:
                self.bus._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        pending, self.pending, self.pending_bytes = self.pending, [], 0
        t = self.transport
        if t is None or self.closed or not pending:
            return
        t.write(pending[0] if len(pending) == 1 else b"".join(pending))
        if t.get_write_buffer_size() > self.bus.max_write_buffer:
            # A peer that does not read is as good as dead; Redis frees such links.
            log.warning("Bus link to %s has %d bytes unsent; closing it",
                        self.node_id or self.link.peer_ip, t.get_write_buffer_size())
            self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()


class _Peer:
    """The outbound side of one node id."""

    __slots__ = ("node_id", "addr", "conn", "dialing", "backlog", "backlog_bytes",
                 "backoff", "retry", "last_send", "reported_up", "closed")

    def __init__(self, node_id: str, addr: tuple[str, int], backoff: float) -> None:
        self.node_id = node_id
        self.addr = addr
        self.conn: _Conn | None = None
        self.dialing: asyncio.Task | None = None
        self.backlog: list[bytes] = []    # frames sent while not connected
        self.backlog_bytes = 0
        self.backoff = backoff
        self.retry: asyncio.TimerHandle | None = None
        self.last_send = 0.0
        self.reported_up: bool | None = None
        self.closed = False


class ClusterBus:
    """Bus listener plus one outbound link per peer. See the module doc.

    ``on_message(link, msg)`` is called for every decoded message (on the loop);
    ``on_link_up(node_id)`` / ``on_link_down(node_id)`` when an outbound link
    connects / fails or closes.
    """

    def __init__(self, on_message: Callable[[Link, BusMessage], None], *,
                 host: str | list[str] | None = "127.0.0.1", port: int = 0,
                 on_link_up: Callable[[str], None] | None = None,
                 on_link_down: Callable[[str], None] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 connect_timeout: float = 2.0, backoff_min: float = 0.1,
                 backoff_max: float = 1.0, max_backlog_bytes: int = 32 << 20,
                 max_write_buffer: int = 256 << 20, idle_timeout: float = 60.0) -> None:
        self.on_message = on_message
        self.on_link_up = on_link_up
        self.on_link_down = on_link_down
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.connect_timeout = connect_timeout
        self.backoff_min = backoff_min
        self.backoff_max = backoff_max
        self.max_backlog_bytes = max_backlog_bytes
        self.max_write_buffer = max_write_buffer
        self.idle_timeout = idle_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._peers: dict[str, _Peer] = {}
        self._inbound: dict[str, _Conn] = {}
        self._inbound_conns: set[_Conn] = set()
        self._housekeeping: asyncio.TimerHandle | None = None
        self._closing = False
        self._jitter = random.Random()   # shell only: backoff jitter
        self._corked: list[_Conn] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await self._loop.create_server(
            lambda: _Conn(self, None), self.host, self.port, reuse_address=True)
        if not self.port:
            self.port = self._server.sockets[0].getsockname()[1]
        self._housekeeping = self._loop.call_later(1.0, self._housekeep)

    async def close(self) -> None:
        self._closing = True
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        if self._server is not None:
            self._server.close()
        for peer in list(self._peers.values()):
            self._forget_peer(peer)
        for conn in list(self._inbound_conns):
            conn.abort()
        if self._server is not None:
            await self._server.wait_closed()

    # -- sending -----------------------------------------------------------------------

    def send(self, node_id: str, ip: str, bus_port: int, msg: BusMessage | bytes) -> None:
        """Queue ``msg`` (or an already encoded frame) for ``node_id``; it goes out
        at the end of this loop turn, together with everything else queued for the
        same connection."""
        if isinstance(msg, BusMessage):
            try:
                msg = encode_frame(msg, self.max_frame_size)
            except BusProtocolError as exc:
                log.warning("Not sending %s to %s: %s", msg.type_name, node_id, exc)
                return
        peer = self._peers.get(node_id)
        if peer is not None and ip and peer.addr != (ip, bus_port):
            # The node moved (or we learnt its real address): reconnect there.
            self._forget_peer(peer)
            peer = None
        if peer is None and ip and bus_port and not self._closing:
            peer = _Peer(node_id, (ip, bus_port), self.backoff_min)
            self._peers[node_id] = peer
            self._dial(peer)
        if peer is not None:
            peer.last_send = self._loop.time()
            if peer.conn is not None:
                peer.conn.write(msg)
                return
        inbound = self._inbound.get(node_id)
        if inbound is not None and not inbound.closed:
            inbound.write(msg)
            return
        if peer is not None and peer.backlog_bytes + len(msg) <= self.max_backlog_bytes:
            peer.backlog.append(msg)
            peer.backlog_bytes += len(msg)

    def cork(self) -> None:
        """Hold what :meth:`send` queues until :meth:`uncork`, which writes it at once
        (one write per connection) instead of at the end of the loop turn: for a
        caller that already sends once per turn (the broker's end-of-turn flush)."""
        if self._corked is None:
            self._corked = []

    def uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked:
            for conn in corked:
                conn._flush()

    def drop_link(self, node_id: str, forget: bool) -> None:
        """Close the outbound link to ``node_id``; reconnect unless ``forget``."""
        peer = self._peers.get(node_id)
        if peer is None:
            return
        if forget:
            self._forget_peer(peer)
        elif peer.conn is not None:
            peer.conn.abort()            # connection_lost reconnects

    def is_connected(self, node_id: str) -> bool:
        peer = self._peers.get(node_id)
        return peer is not None and peer.conn is not None

    # -- outbound links ----------------------------------------------------------------

    def _dial(self, peer: _Peer) -> None:
        peer.retry = None
        if peer.closed or self._closing or peer.dialing is not None:
            return
        peer.dialing = self._loop.create_task(self._connect(peer))

    async def _connect(self, peer: _Peer) -> None:
        ip, port = peer.addr
        try:
            _, conn = await asyncio.wait_for(
                self._loop.create_connection(lambda: _Conn(self, peer), ip, port),
                self.connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            peer.dialing = None
            log.debug("Bus connect to %s %s:%d failed: %s", peer.node_id[:8], ip, port, exc)
            self._link_failed(peer)
            return
        except asyncio.CancelledError:
            peer.dialing = None
            raise
        peer.dialing = None
        if peer.closed or self._closing:
            conn.abort()
            return
        peer.conn = conn
        peer.backoff = self.backoff_min
        backlog, peer.backlog, peer.backlog_bytes = peer.backlog, [], 0
        for frame in backlog:
            conn.write(frame)
        if peer.reported_up is not True:
            peer.reported_up = True
            if self.on_link_up is not None:
                self.on_link_up(peer.node_id)

    def _link_failed(self, peer: _Peer) -> None:
        # Like a TCP connection that broke: what was queued for it is lost (the
        # core retransmits what matters: pings, REPLJOB widening, ack GC...).
        peer.backlog.clear()
        peer.backlog_bytes = 0
        if peer.reported_up is not False:
            peer.reported_up = False
            if self.on_link_down is not None:
                self.on_link_down(peer.node_id)
        if peer.closed or self._closing:
            return
        delay = peer.backoff * (0.5 + self._jitter.random())
        peer.backoff = min(peer.backoff * 2, self.backoff_max)
        peer.retry = self._loop.call_later(delay, self._dial, peer)

    def _forget_peer(self, peer: _Peer) -> None:
        peer.closed = True
        if self._peers.get(peer.node_id) is peer:
            del self._peers[peer.node_id]
        if peer.retry is not None:
            peer.retry.cancel()
            peer.retry = None
        if peer.dialing is not None:
            peer.dialing.cancel()
            peer.dialing = None
        if peer.conn is not None:
            peer.conn.abort()
        elif peer.reported_up:
            peer.reported_up = False
            if self.on_link_down is not None:
                self.on_link_down(peer.node_id)

    def _housekeep(self) -> None:
        # Stop redialling peers nobody sent anything to for a while (e.g. a link
        # opened to answer a node we never added); the next send dials again.
        now = self._loop.time()
        for peer in list(self._peers.values()):
            if now - peer.last_send > self.idle_timeout:
                self._forget_peer(peer)
        self._housekeeping = self._loop.call_later(1.0, self._housekeep)

    # -- callbacks from connections ------------------------------------------------------

    def _identify(self, conn: _Conn, node_id: str) -> None:
        if conn.node_id is not None and self._inbound.get(conn.node_id) is conn:
            del self._inbound[conn.node_id]
        conn.node_id = node_id
        self._inbound[node_id] = conn

    def _dispatch(self, link: Link, msg: BusMessage) -> None:
        # The handler (the output driver) deals with our own bugs itself.
        self.on_message(link, msg)

    def _conn_lost(self, conn: _Conn) -> None:
        peer = conn.peer
        if peer is None:
            self._inbound_conns.discard(conn)
            if conn.node_id is not None and self._inbound.get(conn.node_id) is conn:
                del self._inbound[conn.node_id]
            return
        if peer.conn is conn:
            peer.conn = None
            self._link_failed(peer)
