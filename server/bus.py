# compiled: mypyc (setup.py builds each module whose first line this is)
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

Security (see :meth:`ClusterBus.configure`): with ``tls-cluster`` every link is
mutual TLS (server/tls.py makes the contexts); with ``cluster-auth-pass`` every
link, in both directions, opens with the challenge-response of protocol/bus.py
("Authenticated links") before any bus message, and every frame then carries
its tag. A connection is usable (an outbound link reported up, an inbound one
identified) only once authenticated, so nothing from a peer that failed reaches
the core: the link is closed and logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import random
import secrets as _secrets
import ssl
from typing import Any, Callable, Sequence

from cluster.outputs import Link
from protocol.bus import (
    AUTH_ACCEPT, AUTH_HELLO, AUTH_NONCE_SIZE, AUTH_PROOF, DEFAULT_MAX_FRAME_SIZE, AuthMessage,
    BusCodec, BusMessage, BusProtocolError, BusVersionError, FrameReader, FrameSigner,
    auth_proof, encode_auth, session_keys,
)
from server import listeners

__all__ = ["ClusterBus"]

log = logging.getLogger(__name__)


class _Conn:
    """One TCP connection, either direction: frame reader + coalescing writer.
    An asyncio protocol by its methods (compiled: a native class cannot extend
    asyncio.Protocol, a Python class; asyncio and uvloop take any object)."""

    def __init__(self, bus: "ClusterBus", peer: "_Peer | None") -> None:
        self.bus = bus
        self.peer = peer                 # outbound: the peer we dialled
        self.node_id = peer.node_id if peer is not None else None
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(bus.max_frame_size, bus.codec)
        self.link = Link()
        self.pending: list[bytes] = []
        self.pending_bytes = 0
        self.flush_scheduled = False
        self.closed = False
        # Authentication (cluster-auth-pass): the secrets this link may prove,
        # the handshake while it runs, then the signer of our frames and the
        # secret the link proved.
        self.secrets = bus.secrets
        self.generation = bus.generation     # see ClusterBus.configure
        self.auth: _Handshake | None = None
        self.auth_timer: asyncio.TimerHandle | None = None
        self.signer: FrameSigner | None = None
        self.secret: str | None = None
        # Outbound: True once the link is usable (TLS and authentication done),
        # False if it closed before.
        self.ready: asyncio.Future | None = (
            bus.loop.create_future() if peer is not None else None)

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.generation != self.bus.generation:
            # Accepted or dialled before the TLS or the secrets changed.
            transport.abort()
            return
        self.bus._conns.add(self)
        peername = transport.get_extra_info("peername") or ("",)
        sockname = transport.get_extra_info("sockname") or ("",)
        self.link = Link(peername[0], sockname[0],
                         self.peer.node_id if self.peer is not None else None)
        if self.peer is None:
            self.bus._inbound_conns.add(self)
        if self.secrets:
            # Both sides send their nonce at once (one round trip saved).
            self.auth = _Handshake(self.peer is not None,
                                   _secrets.token_bytes(AUTH_NONCE_SIZE))
            transport.write(encode_auth(AuthMessage(AUTH_HELLO, nonce=self.auth.nonce)))
            if self.peer is None:
                self.auth_timer = self.bus.loop.call_later(
                    self.bus.auth_timeout, self._auth_timeout)
        elif self.ready is not None:
            self.ready.set_result(True)

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
            while self.auth is not None:
                step = self.reader.next_auth()
                if step is None:
                    return
                self._authenticate(step)
            # The handler (the output driver) deals with our own bugs itself.
            on_message = self.bus.on_message
            inbound = self.peer is None
            reader = self.reader
            while (msg := reader.next_message()) is not None:
                if inbound and msg.sender != self.node_id:
                    # Inbound links are known by the sender id in the header.
                    self.bus._identify(self, msg.sender)
                on_message(self.link, msg)
                if self.closed:
                    return
        except BusVersionError as refusal:      # its own name: one type per variable compiled
            self.bus._refuse(self, refusal)
            self.abort()
        except BusProtocolError as exc:
            what = ("authentication failed" if self.auth is not None or self.secrets
                    else "protocol error")
            ip = self.link.peer_ip
            self.bus._warn(f"{ip} {exc}", "Bus %s with %s (node %s, %s link): %s; closing the "
                           "link", what, ip, self.node_id or "?",
                           "outbound" if self.peer is not None else "inbound", exc)
            self.abort()

    # What asyncio.Protocol gave by default: the write buffer's limit is
    # max_write_buffer (see _flush), and a half-closed link is closed.
    def pause_writing(self) -> None:
        pass

    def resume_writing(self) -> None:
        pass

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.transport = None
        self.bus._conns.discard(self)
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(False)
        if isinstance(exc, ssl.SSLError):
            # TLS 1.3: a peer refusing our certificate says so after our side
            # of the handshake is done.
            ip = self.link.peer_ip
            self.bus._warn(f"{ip} {exc}", "Bus TLS error with %s: %s", ip, exc)
        self.bus._conn_lost(self)

    # -- authentication (cluster-auth-pass; the format is protocol/bus.py's) -----------

    def _authenticate(self, msg: AuthMessage) -> None:
        """One handshake step; raises BusProtocolError when the peer fails."""
        st, t = self.auth, self.transport
        # data_received calls it only while the connected link authenticates.
        assert st is not None and t is not None
        if msg.kind == AUTH_HELLO and st.peer_nonce is None:
            st.peer_nonce = msg.nonce
            if st.dialer:
                t.write(encode_auth(AuthMessage(AUTH_PROOF, macs=tuple(
                    auth_proof(k, "dialer", st.nonce, msg.nonce) for k in self.secrets))))
            return
        if msg.kind == AUTH_PROOF and not st.dialer and st.peer_nonce is not None:
            nonce_d, nonce_l = st.peer_nonce, st.nonce
            for secret in self.secrets:          # ours in preference order
                expected = auth_proof(secret, "dialer", nonce_d, nonce_l)
                for index, mac in enumerate(msg.macs):
                    if hmac.compare_digest(mac, expected):
                        t.write(encode_auth(AuthMessage(
                            AUTH_ACCEPT, index=index,
                            mac=auth_proof(secret, "listener", nonce_d, nonce_l))))
                        self._authenticated(secret, nonce_d, nonce_l)
                        return
            raise BusProtocolError("the peer proved no cluster-auth-pass of this node")
        if msg.kind == AUTH_ACCEPT and st.dialer and st.peer_nonce is not None:
            proved = self.secrets[msg.index] if msg.index < len(self.secrets) else None
            if proved is None or not hmac.compare_digest(
                    msg.mac, auth_proof(proved, "listener", st.nonce, st.peer_nonce)):
                raise BusProtocolError("the peer proved no cluster-auth-pass of this node")
            self._authenticated(proved, st.nonce, st.peer_nonce)
            return
        raise BusProtocolError(f"unexpected bus authentication step {msg.kind!r}")

    def _authenticated(self, secret: str, nonce_d: bytes, nonce_l: bytes) -> None:
        if secret not in self.bus.secrets:
            raise BusProtocolError("cluster-auth-pass changed during the handshake")
        to_listener, to_dialer = session_keys(secret, nonce_d, nonce_l)
        st = self.auth
        assert st is not None           # called by _authenticate, during the handshake
        dialer = st.dialer
        self.signer = FrameSigner(to_listener if dialer else to_dialer)
        self.reader.authenticate(to_dialer if dialer else to_listener)
        self.secret = secret
        self.auth = None
        if self.auth_timer is not None:
            self.auth_timer.cancel()
            self.auth_timer = None
        if self.ready is not None and not self.ready.done():
            self.ready.set_result(True)

    def _auth_timeout(self) -> None:
        self.auth_timer = None
        if self.auth is not None and not self.closed:
            ip = self.link.peer_ip
            self.bus._warn(f"{ip} timeout", "Bus authentication failed with %s: no handshake "
                           "within %.0f s; closing the link", ip, self.bus.auth_timeout)
            self.abort()

    # -- writing -----------------------------------------------------------------------

    def write(self, frame: bytes) -> None:
        if self.closed:
            return
        self.pending.append(frame)
        self.pending_bytes += len(frame)
        if self.signer is not None:
            self.pending.append(self.signer.tag(frame))
        if not self.flush_scheduled:
            self.flush_scheduled = True
            corked = self.bus._corked
            if corked is not None:
                corked.append(self)      # written by ClusterBus.uncork
            else:
                self.bus.loop.call_soon(self._flush)

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


class _Handshake:
    """A link's authentication while it runs (see _Conn._authenticate)."""

    __slots__ = ("dialer", "nonce", "peer_nonce")

    def __init__(self, dialer: bool, nonce: bytes) -> None:
        self.dialer = dialer
        self.nonce = nonce
        self.peer_nonce: bytes | None = None


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
    connects / fails or closes. ``ssl_server``/``ssl_client``: TLS contexts of
    both sides of a link (tls-cluster), ``secrets``: cluster-auth-pass and a
    previous one being rotated out (empty: no authentication).
    """

    def __init__(self, on_message: Callable[[Link, BusMessage], None], *,
                 host: str | list[str] | None = "127.0.0.1", port: int = 0,
                 on_link_up: Callable[[str], None] | None = None,
                 on_link_down: Callable[[str], None] | None = None,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 connect_timeout: float = 2.0, backoff_min: float = 0.1,
                 backoff_max: float = 1.0, max_backlog_bytes: int = 32 << 20,
                 max_write_buffer: int = 256 << 20, idle_timeout: float = 60.0,
                 ssl_server: ssl.SSLContext | None = None,
                 ssl_client: ssl.SSLContext | None = None,
                 secrets: Sequence[str] = (), auth_timeout: float = 5.0) -> None:
        self.on_message = on_message
        self.on_link_up = on_link_up
        self.on_link_down = on_link_down
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        # The node's bus bodies: every link's frames decoded, and what send encodes.
        self.codec = BusCodec()
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
        self.ssl_server = ssl_server
        self.ssl_client = ssl_client
        self.secrets = list(secrets)
        self.auth_timeout = auth_timeout
        self._servers: list = []          # one per listening socket
        self._conns: set[_Conn] = set()   # every open connection, both directions
        # Bumped by configure: a connection set up under older TLS contexts or
        # secrets is dropped when it opens (it reconnects under the new ones).
        self.generation = 0
        self._relisten: asyncio.Lock | None = None
        self._warned: dict[str, float] = {}
        # (node id or address, its versions) of each peer refused for its
        # bus versions: logged once (_refuse)
        self._refused: set[tuple[str, int, int]] = set()
        # cluster-bus-route (ext): announced bus address -> address to dial.
        self.routes: dict[tuple[str, int], tuple[str, int]] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop it runs on, from start()."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("ClusterBus.start() has not run")
        return loop

    # -- lifecycle ---------------------------------------------------------------------

    def _new_conn(self, peer: _Peer | None) -> Any:
        # Any: asyncio's factories are typed to return an asyncio.Protocol,
        # which _Conn is by its methods only (see _Conn).
        return _Conn(self, peer)

    async def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._relisten = asyncio.Lock()
        server = self._server = await loop.create_server(
            lambda: self._new_conn(None), self.host, self.port, reuse_address=True,
            ssl=self.ssl_server)
        self._servers = [server]
        if not self.port:
            self.port = server.sockets[0].getsockname()[1]
        self._housekeeping = loop.call_later(1.0, self._housekeep)

    async def close(self) -> None:
        self._closing = True
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        listeners.close(self._servers)
        for peer in list(self._peers.values()):
            self._forget_peer(peer)
        for conn in list(self._inbound_conns):
            conn.abort()
        for srv in self._servers:
            await srv.wait_closed()

    def configure(self, ssl_server: ssl.SSLContext | None, ssl_client: ssl.SSLContext | None,
                  secrets: Sequence[str]) -> None:
        """New TLS contexts and/or secrets, at run time. Turning TLS or
        authentication on or off re-opens every link (the peers must agree);
        new certificates apply to new links; a rotation closes only the links
        that proved a secret no longer accepted (they reconnect with the new
        one)."""
        mode_changed = ((ssl_server is None) != (self.ssl_server is None)
                        or bool(secrets) != bool(self.secrets))
        tls_changed = ssl_server is not self.ssl_server
        self.ssl_server, self.ssl_client, self.secrets = ssl_server, ssl_client, list(secrets)
        self.generation += 1
        if tls_changed and self._servers:
            self.loop.create_task(self._serve_again())
        for conn in list(self._conns):
            if mode_changed or conn.auth is not None or (
                    conn.secret is not None and conn.secret not in self.secrets):
                conn.abort()

    def set_routes(self, routes: dict[tuple[str, int], tuple[str, int]]) -> None:
        """New cluster-bus-route table: the links whose dialed address changes
        are dropped and reconnect through the new one."""
        old, self.routes = self.routes, dict(routes)
        for peer in list(self._peers.values()):
            if old.get(peer.addr) != self.routes.get(peer.addr) and peer.conn is not None:
                peer.conn.abort()        # connection_lost redials

    async def _serve_again(self) -> None:
        relisten = self._relisten
        if relisten is None:
            return                       # not started
        async with relisten:             # in the order asked: the last context wins
            if not self._closing:
                self._servers = await listeners.reserve(
                    self._servers, lambda: self._new_conn(None), self.ssl_server)

    def _refuse(self, conn: _Conn, exc: BusVersionError) -> None:
        """A peer with no bus version in common: one warning per peer and
        versions for the process's life (it redials every second), the
        repeats at the debug level."""
        ip = conn.link.peer_ip
        key = (exc.sender or ip, exc.peer_lo, exc.peer_hi)
        if key in self._refused:
            log.debug("Bus link with %s refused again: %s", ip, exc)
            return
        self._refused.add(key)
        log.warning("Bus link with %s refused: %s; %s", ip, exc,
                    "upgrade this node to a release that speaks it"
                    if exc.peer_is_newer else "upgrade that node")

    def _warn(self, key: str, fmt: str, *args) -> None:
        """A warning, at most once per 10 s per ``key`` (peer address and
        reason: a misconfigured peer retries every second); the repeats go to
        the debug level."""
        now = self.loop.time()
        if now - self._warned.get(key, -1e9) >= 10.0:
            self._warned[key] = now
            log.warning(fmt, *args)
        else:
            log.debug(fmt, *args)

    # -- sending -----------------------------------------------------------------------

    def send(self, node_id: str, ip: str, bus_port: int, msg: BusMessage | bytes) -> None:
        """Queue ``msg`` (or an already encoded frame) for ``node_id``; it goes out
        at the end of this loop turn, together with everything else queued for the
        same connection."""
        if isinstance(msg, BusMessage):
            try:
                frame = self.codec.encode_frame(msg, self.max_frame_size)
            except BusProtocolError as exc:
                log.warning("Not sending %s to %s: %s", msg.type_name, node_id, exc)
                return
        else:
            frame = msg
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
            peer.last_send = self.loop.time()
            if peer.conn is not None:
                peer.conn.write(frame)
                return
        inbound = self._inbound.get(node_id)
        if inbound is not None and not inbound.closed:
            inbound.write(frame)
            return
        if peer is not None and peer.backlog_bytes + len(frame) <= self.max_backlog_bytes:
            peer.backlog.append(frame)
            peer.backlog_bytes += len(frame)

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
        peer.dialing = self.loop.create_task(self._connect(peer))

    async def _connect(self, peer: _Peer) -> None:
        ip, port = self.routes.get(peer.addr, peer.addr)
        conn: _Conn | None = None
        try:
            _, made = await asyncio.wait_for(
                self.loop.create_connection(lambda: self._new_conn(peer), ip, port,
                                             ssl=self.ssl_client),
                self.connect_timeout)
            conn = made
            # TLS is done; authentication (if any) before the link is usable.
            ready = made.ready
            if ready is None or not await asyncio.wait_for(ready, self.auth_timeout):
                raise ConnectionError("the link closed before it was authenticated")
        except (OSError, asyncio.TimeoutError) as exc:
            peer.dialing = None
            if conn is not None:
                conn.abort()
                if conn.auth is not None and isinstance(exc, asyncio.TimeoutError):
                    self._warn(f"{ip} timeout", "Bus authentication failed with %s:%d: no "
                               "handshake within %.0f s; closing the link", ip, port,
                               self.auth_timeout)
            elif isinstance(exc, ssl.SSLError):
                self._warn(f"{ip} {exc}", "Bus TLS handshake with %s:%d failed: %s", ip, port,
                           exc)
            else:
                log.debug("Bus connect to %s %s:%d failed: %s", peer.node_id[:8], ip, port,
                          exc)
            self._link_failed(peer)
            return
        except asyncio.CancelledError:
            peer.dialing = None
            if conn is not None:
                conn.abort()
            raise
        peer.dialing = None
        if peer.closed or self._closing:
            made.abort()
            return
        if made.closed:             # lost between its handshake and now
            self._link_failed(peer)
            return
        peer.conn = made
        peer.backoff = self.backoff_min
        backlog, peer.backlog, peer.backlog_bytes = peer.backlog, [], 0
        for frame in backlog:
            made.write(frame)
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
        peer.retry = self.loop.call_later(delay, self._dial, peer)

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
        now = self.loop.time()
        for peer in list(self._peers.values()):
            if now - peer.last_send > self.idle_timeout:
                self._forget_peer(peer)
        self._housekeeping = self.loop.call_later(1.0, self._housekeep)

    # -- callbacks from connections ------------------------------------------------------

    def _identify(self, conn: _Conn, node_id: str) -> None:
        if conn.node_id is not None and self._inbound.get(conn.node_id) is conn:
            del self._inbound[conn.node_id]
        conn.node_id = node_id
        self._inbound[node_id] = conn
        peer = self._peers.get(node_id)
        if peer is not None and peer.retry is not None:
            # It just connected to us, so it is up again (restarted): redial now,
            # not at the end of the backoff (Disque redials every 100 ms).
            peer.retry.cancel()
            peer.backoff = self.backoff_min
            self._dial(peer)

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
