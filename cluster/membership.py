# compiled: mypyc (setup.py builds each module whose first line this is)
"""Cluster membership and failure detection (sans-IO), after Disque's cluster.c.

SPEC.md §8: "Full mesh over the bus. ``CLUSTER MEET`` on either side joins; gossip
spreads the rest within a few seconds. PING/PONG carry the sender's view and a few
gossip entries. A node not answering within ``cluster-node-timeout`` (default 15000
ms) is PFAIL; PFAIL reported by a majority becomes FAIL, broadcast, and is cleared
when it answers."

This module owns the node table and decides; it never touches sockets, clocks, the
global ``random`` or files. Inputs: :meth:`Membership.handle_message` (a decoded bus
message plus the :class:`Link` it came on), :meth:`Membership.tick` (call it every
~100 ms, like Redis' clusterCron), the admin commands (:meth:`meet`, :meth:`forget`,
:meth:`reset`, :meth:`set_leaving`) and the shell's link reports
(:meth:`link_up`/:meth:`link_down`). Every one of them takes ``now`` (ms; pass
wall-clock ms so CLUSTER NODES shows Redis-like timestamps) and returns a list of
outputs (cluster/outputs.py):

* :class:`Send` - a bus message for one node, with the address we believe it has;
* :class:`DropLink` - close the link to a node (stale link, or node deleted);
* :class:`SaveConfig` - the nodes.conf text to write (SPEC §1: saved on every change;
  when a batch holds several, only the last one matters);
* :class:`NodeEvent` - something the job layer may care about (node added, deleted,
  PFAIL, FAIL, recovered, leaving...). Safe to ignore.

How a node joins (as in Redis Cluster): ``meet`` creates a *handshake* node with a
random temporary id and sends it a MEET; the answer (PONG) echoes the id we used, so
we rename the handshake node to the sender's real id. The MEET receiver does the same
the other way round (it creates a handshake node for the sender's address and pings
it). Nodes learnt from gossip are joined the same way, by address, so a gossiped
id that no longer answers at that address is never added (no ghosts), and an id
forgotten with CLUSTER FORGET stays out for 60 s (the blacklist).
"""

from __future__ import annotations

import ipaddress
import random
import re
from typing import Any, Final, Iterable

from broker.cluster_hooks import ClusterError
from broker.job import random_node_id
from cluster.outputs import (
    MYSELF_ID, NODE_ADDED, NODE_ADDRESS, NODE_DELETED, NODE_FAIL, NODE_LEAVING, NODE_PFAIL,
    NODE_RECOVERED, DropLink, Link, NodeEvent, SaveConfig, Send,
)
from protocol.bus import (
    BUS_VERSION_MAX, BUS_VERSION_MIN, FAIL, FIRST_JOB_TYPE, FLAG_FAIL, FLAG_HANDSHAKE,
    FLAG_LEAVING, FLAG_MEET, FLAG_MYSELF, FLAG_NOADDR, FLAG_PFAIL, MEET, PING, PONG,
    VERSIONS_SHIFT, WIRE_FLAGS, BusMessage, GossipEntry, flags_to_names, settled_version,
    versions_flags,
)

__all__ = ["Membership", "ClusterNode", "MembershipError", "is_node_id"]

_HEX40 = re.compile(r"[0-9a-f]{40}\Z")

_UNREACHABLE: Final = (FLAG_MYSELF | FLAG_HANDSHAKE | FLAG_NOADDR | FLAG_PFAIL | FLAG_FAIL
                | FLAG_LEAVING)

#: Redis: failure reports older than node_timeout * 2 are not counted.
FAIL_REPORT_VALIDITY_MULT = 2
#: SPEC §4: "FORGET also blacklists the id for 60 s".
BLACKLIST_TTL = 60_000
#: Redis pings one random node (the one with the oldest pong among 5 samples) every
#: second, on top of the "every node every node_timeout/2" rule.
RANDOM_PING_PERIOD = 1000
RANDOM_PING_SAMPLES = 5
#: A node we flag PFAIL/FAIL that talks to us is pinged at once, at most this often
#: (Disque redials a node without a link on every 100 ms clusterCron).
FAILING_PING_INTERVAL = 100


def is_node_id(s: str) -> bool:
    return isinstance(s, str) and _HEX40.match(s) is not None


class MembershipError(ClusterError):
    """An admin command cannot be applied; the text is the RESP error without the
    ``ERR`` prefix (Redis' wording). A ClusterError: the CLUSTER commands
    (broker/commands/cluster.py) catch it under the broker's name."""


# -- the node table ------------------------------------------------------------------

class ClusterNode:
    """One entry of the node table (myself included)."""

    __slots__ = (
        "id", "ip", "port", "bus_port", "flags", "ctime", "ping_sent", "last_ping",
        "pong_received", "data_received", "fail_time", "fail_reports", "link",
        "link_since", "versions", "bus_version",
    )

    def __init__(self, node_id: str, ip: str, port: int, bus_port: int, flags: int,
                 ctime: int, bus_version: int = BUS_VERSION_MIN) -> None:
        self.id = node_id
        self.ip = ip
        self.port = port
        self.bus_port = bus_port
        self.flags = flags
        self.ctime = ctime
        self.ping_sent = 0        # time of the first unanswered PING, 0: none pending
        self.last_ping = 0        # time of the last (re)transmission of that PING
        self.pong_received = 0    # time of the last PONG, 0: never
        self.data_received = 0    # time of the last message of any type
        self.fail_time = 0
        # reporter id -> time of its latest PFAIL/FAIL gossip about this node
        self.fail_reports: dict[str, int] = {}
        self.link = False         # outbound link up, as reported by the shell
        self.link_since = 0
        # The bus versions its headers say (their flags above VERSIONS_SHIFT),
        # -1 until we hear it on the link, and the version our frames to it
        # are written in (protocol/bus.py "Versions"): our lowest until then.
        self.versions = -1
        self.bus_version = bus_version

    def __repr__(self) -> str:
        return (f"ClusterNode({self.id[:8]} {self.ip}:{self.port}@{self.bus_port} "
                f"{flags_to_names(self.flags)})")

    @property
    def failing(self) -> bool:
        return bool(self.flags & (FLAG_PFAIL | FLAG_FAIL))


class Membership:
    """The node table plus PING/PONG/MEET/FAIL handling. See the module doc."""

    def __init__(self, myself_id: str, ip: str, port: int, bus_port: int, *,
                 node_timeout: int = 15000, rng: random.Random, now: int = 0,
                 bus_versions: tuple[int, int] = (BUS_VERSION_MIN, BUS_VERSION_MAX)) -> None:
        """``bus_versions``: the bus versions it speaks (this release's; a
        test gives others to play a node of another release)."""
        if not is_node_id(myself_id):
            raise ValueError(f"invalid node id {myself_id!r}")
        self.rng = rng
        self.bus_lo, self.bus_hi = bus_versions
        # Said in every header we send (protocol/bus.py versions_flags).
        self.versions_flags = versions_flags(self.bus_lo, self.bus_hi)
        #: ``cluster-node-timeout`` in ms; may be changed at run time (CONFIG SET).
        self.node_timeout = node_timeout
        self.myself = ClusterNode(myself_id, ip, port, bus_port, FLAG_MYSELF, now)
        self.nodes: dict[str, ClusterNode] = {myself_id: self.myself}
        self.blacklist: dict[str, int] = {}     # node id -> expire time
        # Links the shell reported up, by node id, even for ids not (yet) in the
        # table: a reply to an unknown sender opens a link before the handshake
        # makes it a known node.
        self._links_up: dict[str, int] = {}
        self.stats_sent = 0
        self.stats_received = 0
        self._next_random_ping = now + RANDOM_PING_PERIOD
        self._dirty = False
        self._out: list = []
        # reachable_sorted(), computed at most once between two inputs (every input
        # that may change a node's flags or the table resets it).
        self._reachable: tuple | None = None

    # -- identity ------------------------------------------------------------------

    @property
    def node_id(self) -> str:
        return self.myself.id

    @property
    def leaving(self) -> bool:
        return bool(self.myself.flags & FLAG_LEAVING)

    def set_address(self, ip: str, port: int, bus_port: int) -> list:
        """Announce another address (CONFIG SET cluster-announce-*)."""
        self._input()
        me = self.myself
        if (me.ip, me.port, me.bus_port) != (ip, port, bus_port):
            me.ip, me.port, me.bus_port = ip, port, bus_port
            self._dirty = True
        return self._flush()

    # -- output plumbing -------------------------------------------------------------

    def _flush(self) -> list:
        out = self._out
        self._out = []
        if self._dirty:
            self._dirty = False
            out.append(SaveConfig(self.to_nodes_conf()))
        return out

    def _event(self, kind: str, node_id: str, detail: Any = None) -> None:
        self._out.append(NodeEvent(kind, node_id, detail))

    def message(self, mtype: int, payload: Any = None, gossip: list | None = None
                ) -> BusMessage:
        """A bus message with our header, for any type (the job layer uses it too)."""
        me = self.myself
        return BusMessage(mtype, me.id, me.ip, me.port, me.bus_port,
                          (me.flags & FLAG_LEAVING) | self.versions_flags,
                          gossip if gossip is not None else [], payload)

    def bus_version(self, node_id: str) -> int:
        """The bus version of our frames to ``node_id``: the one its link
        settled, our lowest until it has."""
        node = self.nodes.get(node_id)
        return node.bus_version if node is not None else self.bus_lo

    def note_sent(self, count: int = 1) -> None:
        """Count messages the job layer sent (cluster_stats_messages_sent)."""
        self.stats_sent += count

    def _send(self, node: ClusterNode, msg: BusMessage) -> None:
        self.stats_sent += 1
        self._out.append(Send(node.id, node.ip, node.bus_port, msg, node.bus_version))

    def _gossip(self, now: int, dest: ClusterNode | None) -> list[GossipEntry]:
        # Redis clusterSendPing: max(3, N/10) random nodes the receiver may not know,
        # never ourselves (the header is about us), handshake nodes or nodes without
        # an address, nor nodes that never answered us (they may be gone: do not
        # spread them). Plus every PFAIL node: that is how failure reports travel.
        fresh = []
        pfail = []
        for node in self.nodes.values():
            f = node.flags
            if f & (FLAG_MYSELF | FLAG_HANDSHAKE | FLAG_NOADDR) or node is dest:
                continue
            if f & FLAG_PFAIL:
                pfail.append(node)
            elif node.pong_received:
                fresh.append(node)
        wanted = max(3, len(self.nodes) // 10)
        if len(fresh) > wanted:
            fresh = self.rng.sample(fresh, wanted)
        entries = []
        for node in fresh + pfail:
            entries.append(GossipEntry(
                node.id, node.ip, node.port, node.bus_port, node.flags & WIRE_FLAGS,
                now - node.ping_sent if node.ping_sent else -1,
                now - node.pong_received if node.pong_received else -1))
        return entries

    def _ping(self, node: ClusterNode, now: int, mtype: int = PING) -> None:
        if node.flags & FLAG_MEET:
            mtype = MEET
        # A retransmission keeps the time of the first unanswered PING: PFAIL is
        # measured from there (Redis does the same when it reconnects a link).
        if not node.ping_sent:
            node.ping_sent = now
        node.last_ping = now
        self._send(node, self.message(mtype, node.id, self._gossip(now, node)))

    # -- admin commands ----------------------------------------------------------------

    def meet(self, ip: str, bus_port: int, now: int) -> list:
        """CLUSTER MEET: start a handshake with the node at (ip, bus_port)."""
        self._input()
        try:
            ip = str(ipaddress.ip_address(ip))
        except ValueError:
            raise MembershipError(f"Invalid node address specified: {ip}:{bus_port}") from None
        if not 0 < bus_port <= 65535:
            raise MembershipError(f"Invalid node address specified: {ip}:{bus_port}")
        node = self._start_handshake(ip, 0, bus_port, now, meet=True)
        if node is not None:
            self._ping(node, now)
        return self._flush()

    def forget(self, node_id: str, now: int) -> list:
        """CLUSTER FORGET: drop the node and blacklist its id for 60 s, so the gossip
        of nodes that still know it does not bring it back at once."""
        self._input()
        if node_id == self.myself.id:
            raise MembershipError("I tried hard but I can't forget myself...")
        if node_id not in self.nodes:
            raise MembershipError(f"Unknown node {node_id}")
        self.blacklist[node_id] = now + BLACKLIST_TTL
        self._delete(self.nodes[node_id])
        return self._flush()

    def reset(self, hard: bool, new_id: str | None = None, now: int = 0) -> list:
        """CLUSTER RESET: forget every other node; HARD also takes a new id (random
        from our rng unless given). Dropping the jobs is the broker's part."""
        self._input()
        for node in [n for n in self.nodes.values() if n is not self.myself]:
            self._delete(node)
        self.blacklist.clear()
        if hard:
            new_id = new_id or random_node_id(self.rng)
            if not is_node_id(new_id):
                raise ValueError(f"invalid node id {new_id!r}")
            del self.nodes[self.myself.id]
            self.myself.id = new_id
            self.nodes[new_id] = self.myself
            self._event(MYSELF_ID, new_id)
        self._dirty = True
        return self._flush()

    def set_leaving(self, leaving: bool, now: int = 0) -> list:
        """CLUSTER LEAVING yes|no: advertised in our header flags (SPEC §8: the node
        "shows priority 100 in HELLO everywhere")."""
        self._input()
        me = self.myself
        if bool(me.flags & FLAG_LEAVING) != leaving:
            me.flags ^= FLAG_LEAVING
            self._dirty = True
            self._event(NODE_LEAVING, me.id, leaving)
        return self._flush()

    # -- links (reported by the shell) ---------------------------------------------------

    def link_up(self, node_id: str, now: int) -> list:
        self._links_up[node_id] = now
        node = self.nodes.get(node_id)
        if node is not None and not node.link:
            node.link = True
            node.link_since = now
            # Redis: "Queue a PING in the new connection ASAP: this is crucial to
            # avoid false positives in failure detection" (keeps the old ping_sent).
            if node is not self.myself:
                self._ping(node, now)
        return self._flush()

    def link_down(self, node_id: str, now: int) -> list:
        self._links_up.pop(node_id, None)
        node = self.nodes.get(node_id)
        if node is not None:
            node.link = False
            # The peer may come back as another release: our lowest version
            # until we hear it again.
            node.versions = -1
            node.bus_version = self.bus_lo
        return self._flush()

    # -- the table -----------------------------------------------------------------------

    def _start_handshake(self, ip: str, port: int, bus_port: int, now: int,
                         meet: bool) -> ClusterNode | None:
        # Redis clusterStartHandshake: at most one handshake per address at a time.
        for node in self.nodes.values():
            if (node.flags & FLAG_HANDSHAKE and node.ip == ip
                    and node.bus_port == bus_port):
                if meet:
                    node.flags |= FLAG_MEET
                return None
        node_id = random_node_id(self.rng)
        flags = FLAG_HANDSHAKE | (FLAG_MEET if meet else 0)
        node = ClusterNode(node_id, ip, port, bus_port, flags, now, self.bus_lo)
        self.nodes[node_id] = node
        return node

    def _delete(self, node: ClusterNode) -> None:
        del self.nodes[node.id]
        for other in self.nodes.values():
            other.fail_reports.pop(node.id, None)
        self._out.append(DropLink(node.id, True))
        if not node.flags & FLAG_HANDSHAKE:
            self._dirty = True
            self._event(NODE_DELETED, node.id)

    def _add_real(self, node_id: str, ip: str, port: int, bus_port: int,
                  now: int) -> ClusterNode:
        node = ClusterNode(node_id, ip, port, bus_port, 0, now, self.bus_lo)
        if node_id in self._links_up:
            node.link = True
            node.link_since = self._links_up[node_id]
        self.nodes[node_id] = node
        self._dirty = True
        self._event(NODE_ADDED, node_id)
        return node

    def _update_address(self, node: ClusterNode, ip: str, port: int, bus_port: int) -> None:
        if not ip:
            return
        if (node.ip, node.port, node.bus_port) == (ip, port, bus_port) and \
                not node.flags & FLAG_NOADDR:
            return
        node.ip, node.port, node.bus_port = ip, port, bus_port
        node.flags &= ~FLAG_NOADDR
        self._dirty = True
        self._event(NODE_ADDRESS, node.id, (ip, port, bus_port))
        # The shell sees the new address in the next Send and reconnects.

    def _clear_failure(self, node: ClusterNode) -> None:
        # SPEC §8: FAIL "is cleared when it answers" (no slots here, so no reason to
        # wait as Redis does for masters serving slots).
        if node.flags & (FLAG_PFAIL | FLAG_FAIL):
            if node.flags & FLAG_FAIL:
                self._dirty = True
            node.flags &= ~(FLAG_PFAIL | FLAG_FAIL)
            node.fail_reports.clear()
            self._event(NODE_RECOVERED, node.id)

    # -- bus messages --------------------------------------------------------------------

    def handle_message(self, link: Link | None, msg: BusMessage, now: int) -> list:
        """Process the membership part of any bus message. Job-layer types only
        refresh what the header says about the sender; the broker dispatches them
        after this call (and should ignore senders ``is_known`` says no to)."""
        if msg.type >= FIRST_JOB_TYPE and self._nothing_new(link, msg, now):
            return []
        self._input()
        self.stats_received += 1
        mtype = msg.type
        me = self.myself
        if msg.sender == me.id:
            # Our own PING/MEET came back: we met our own address. Drop that
            # handshake (no need to answer ourselves).
            if mtype in (PING, MEET, PONG):
                dest = self.nodes.get(msg.payload) if isinstance(msg.payload, str) else None
                if dest is not None and dest.flags & FLAG_HANDSHAKE:
                    self._delete(dest)
            return self._flush()
        peer_ip = link.peer_ip if link is not None else ""
        ip = msg.ip or peer_ip
        sender = self.nodes.get(msg.sender)
        if sender is not None and sender.flags & FLAG_HANDSHAKE:
            sender = None    # a temporary id can't be a real sender id; be paranoid

        if mtype == MEET:
            # Redis: a node that does not know its own address learns it from the
            # first MEET (the address the peer reached us on).
            if not me.ip and link is not None and link.local_ip:
                me.ip = link.local_ip
                self._dirty = True
            if sender is None and ip and msg.bus_port:
                # "MEET on either side joins": trust the sender, handshake back
                # to it, and trust its gossip for discovery.
                self._start_handshake(ip, msg.port, msg.bus_port, now, meet=False)
                self._discover(msg.gossip, now)

        if mtype == PING or mtype == MEET:
            # Always answer, even an unknown sender: its handshake needs our PONG.
            # The payload echo tells it which of its node entries we answered for.
            reply = self.message(PONG, msg.payload, self._gossip(now, sender))
            self.stats_sent += 1
            self._out.append(Send(msg.sender, ip, msg.bus_port, reply,
                                  sender.bus_version if sender is not None else self.bus_lo))

        elif mtype == PONG:
            dest_id = msg.payload if isinstance(msg.payload, str) else None
            dest = self.nodes.get(dest_id) if dest_id else None
            if dest is not None and dest is not sender and dest is not me:
                if dest.flags & FLAG_HANDSHAKE:
                    if sender is None:
                        # Handshake done: the temporary node takes the real id. (No
                        # blacklist check, as in Redis: gossip can't start a
                        # handshake for a blacklisted id, an explicit MEET may.)
                        self._delete(dest)
                        sender = self._add_real(msg.sender, ip, msg.port,
                                                msg.bus_port, now)
                    else:
                        # We already knew that node: drop the handshake node.
                        self._delete(dest)
                else:
                    # Another node answers at dest's address: dest moved or took a
                    # new id (RESET HARD). Redis marks it NOADDR until gossip or a
                    # message from it tells its new address.
                    if not dest.flags & FLAG_NOADDR:
                        dest.flags |= FLAG_NOADDR
                        dest.ip = ""
                        dest.ping_sent = 0
                        self._dirty = True
                        self._event(NODE_ADDRESS, dest.id, None)
                        self._out.append(DropLink(dest.id, False))
            if sender is not None:
                sender.pong_received = now
                sender.ping_sent = 0
                self._clear_failure(sender)

        if sender is None:
            return self._flush()

        sender.data_received = now
        said = msg.flags >> VERSIONS_SHIFT
        if said != sender.versions:
            # The link settles on the highest version both speak (the decoder
            # refused a sender with none in common).
            sender.versions = said
            sender.bus_version = settled_version(msg.flags, self.bus_lo, self.bus_hi) \
                or self.bus_lo
        self._update_address(sender, ip, msg.port, msg.bus_port)
        if sender.failing and now - sender.last_ping >= FAILING_PING_INTERVAL:
            # It is back (restarted, partition healed): ping it now, not at the
            # next retransmission (node_timeout/4) or once our link redials (up to
            # 1.5 s), so its PONG clears the flag within a round trip, as soon as
            # Disque's 100 ms redial would. The PING goes back on its own link
            # while ours is down.
            self._ping(sender, now)
        leaving = bool(msg.flags & FLAG_LEAVING)
        if bool(sender.flags & FLAG_LEAVING) != leaving:
            sender.flags ^= FLAG_LEAVING
            self._dirty = True
            self._event(NODE_LEAVING, sender.id, leaving)

        if msg.gossip:
            self._process_gossip(sender, msg.gossip, now)

        if mtype == FAIL:
            failing = self.nodes.get(msg.payload) if isinstance(msg.payload, str) else None
            if (failing is not None and failing is not me
                    and not failing.flags & (FLAG_FAIL | FLAG_HANDSHAKE)):
                failing.flags = (failing.flags | FLAG_FAIL) & ~FLAG_PFAIL
                failing.fail_time = now
                self._dirty = True
                self._event(NODE_FAIL, failing.id, ("msg", sender.id))
        return self._flush()

    def _nothing_new(self, link: Link | None, msg: BusMessage, now: int) -> bool:
        """A job-layer message whose header tells nothing we do not know (a
        known, healthy sender at the address we have for it, LEAVING as we
        have it, no gossip): what handle_message would do with it, done here
        (the sender heard from, the message counted), without marking the
        reachable nodes stale. Most frames are these; each stale mark made
        the next ADDJOB recount the reachable nodes."""
        sender = self.nodes.get(msg.sender)
        if sender is None or msg.gossip:
            return False
        flags = sender.flags
        # unreachable for a reason other than LEAVING, or LEAVING changed, or
        # the versions it speaks (its link's not settled, or another release)
        if flags & (_UNREACHABLE & ~FLAG_LEAVING) or (msg.flags ^ flags) & FLAG_LEAVING \
                or msg.flags >> VERSIONS_SHIFT != sender.versions:
            return False
        ip = msg.ip
        if not ip and link is not None:
            ip = link.peer_ip
        if ip and (ip != sender.ip or msg.port != sender.port
                   or msg.bus_port != sender.bus_port):
            return False
        self.stats_received += 1
        sender.data_received = now
        return True

    def _discover(self, gossip: Iterable[GossipEntry], now: int) -> None:
        for e in gossip:
            if (e.node_id not in self.nodes and e.node_id not in self.blacklist
                    and e.ip and not e.flags & FLAG_NOADDR and e.bus_port):
                self._start_handshake(e.ip, e.port, e.bus_port, now, meet=False)

    def _process_gossip(self, sender: ClusterNode, gossip: list, now: int) -> None:
        me = self.myself
        for e in gossip:
            node = self.nodes.get(e.node_id)
            if node is None:
                if (e.node_id not in self.blacklist and e.ip and e.bus_port
                        and not e.flags & FLAG_NOADDR):
                    self._start_handshake(e.ip, e.port, e.bus_port, now, meet=False)
                continue
            if node is me or node.flags & FLAG_HANDSHAKE:
                continue
            if e.flags & (FLAG_PFAIL | FLAG_FAIL):
                # A failure report: the sender can't reach this node either.
                node.fail_reports[sender.id] = now
                self._mark_failing_if_needed(node, now)
            else:
                node.fail_reports.pop(sender.id, None)
                # Redis: a node we can't reach but others can may have moved: take
                # the address they see (we will reconnect there).
                if (node.failing or node.flags & FLAG_NOADDR) and e.ip and \
                        (e.ip, e.port, e.bus_port) != (node.ip, node.port, node.bus_port):
                    self._update_address(node, e.ip, e.port, e.bus_port)

    # -- failure detection -----------------------------------------------------------------

    def _quorum_size(self) -> int:
        """Known nodes that are not FAIL, myself included: "a majority of known
        non-failing nodes". PFAIL nodes still count, so a minority side of a
        partition can never reach the quorum on its own."""
        size = 0
        for node in self.nodes.values():
            if not node.flags & (FLAG_HANDSHAKE | FLAG_NOADDR | FLAG_FAIL):
                size += 1
        return size

    def _mark_failing_if_needed(self, node: ClusterNode, now: int) -> None:
        # Redis markNodeAsFailingIfNeeded: we must see it PFAIL ourselves, and
        # enough others must have reported it PFAIL/FAIL within the validity window.
        if not node.flags & FLAG_PFAIL or node.flags & FLAG_FAIL:
            return
        validity = self.node_timeout * FAIL_REPORT_VALIDITY_MULT
        reports = node.fail_reports
        for rid in [r for r, t in reports.items()
                    if now - t > validity or r not in self.nodes]:
            del reports[rid]
        size = self._quorum_size()
        needed = size // 2 + 1
        if len(reports) + 1 < needed:
            return
        node.flags = (node.flags | FLAG_FAIL) & ~FLAG_PFAIL
        node.fail_time = now
        self._dirty = True
        self._event(NODE_FAIL, node.id,
                    ("quorum", (self.myself.id, *reports), size))
        # Broadcast, so nodes that did not see the failure agree quickly.
        msg = self.message(FAIL, node.id)
        for other in self.nodes.values():
            if not other.flags & (FLAG_MYSELF | FLAG_HANDSHAKE | FLAG_NOADDR) \
                    and other is not node:
                self._send(other, msg)

    def tick(self, now: int) -> list:
        """Periodic work (every ~100 ms): pings, PFAIL, FAIL, handshake timeouts."""
        self._input()
        timeout = self.node_timeout
        half = timeout // 2
        retry = max(timeout // 4, 100)
        handshake_timeout = max(timeout, 1000)

        if self.blacklist:
            for nid in [n for n, exp in self.blacklist.items() if exp <= now]:
                del self.blacklist[nid]

        if now >= self._next_random_ping:
            self._next_random_ping = now + RANDOM_PING_PERIOD
            candidates = [n for n in self.nodes.values()
                          if not n.flags & (FLAG_MYSELF | FLAG_HANDSHAKE | FLAG_NOADDR)
                          and not n.ping_sent]
            if candidates:
                if len(candidates) > RANDOM_PING_SAMPLES:
                    candidates = self.rng.sample(candidates, RANDOM_PING_SAMPLES)
                oldest = min(candidates, key=lambda n: n.pong_received)
                self._ping(oldest, now)

        for node in list(self.nodes.values()):
            flags = node.flags
            if flags & (FLAG_MYSELF | FLAG_NOADDR):
                continue
            if flags & FLAG_HANDSHAKE and now - node.ctime > handshake_timeout:
                self._delete(node)
                continue
            if node.ping_sent:
                # No answer for node_timeout/2 on a link that is up and not new:
                # the connection may be half dead, have the shell reconnect.
                if (node.link and now - node.link_since > timeout
                        and now - node.ping_sent > half
                        and now - node.data_received > half):
                    node.link = False
                    self._out.append(DropLink(node.id, False))
                if now - node.last_ping >= retry:
                    self._ping(node, now)
                if (now - node.ping_sent > timeout
                        and not flags & (FLAG_PFAIL | FLAG_FAIL | FLAG_HANDSHAKE)):
                    node.flags |= FLAG_PFAIL
                    self._event(NODE_PFAIL, node.id)
            elif not node.pong_received or now - node.pong_received > half:
                # Every node is pinged at least every node_timeout/2 (and at once
                # when it never answered: a new handshake, a node from nodes.conf).
                self._ping(node, now)
            if node.flags & FLAG_PFAIL:
                self._mark_failing_if_needed(node, now)
        return self._flush()

    def next_deadline(self, now: int) -> int:
        """When :meth:`tick` should run next at the latest (the sim uses it)."""
        return now + 100

    # -- queries ---------------------------------------------------------------------------

    def is_known(self, node_id: str) -> bool:
        node = self.nodes.get(node_id)
        return node is not None and not node.flags & FLAG_HANDSHAKE

    def known_ids(self) -> list[str]:
        """Every real node (no handshake), myself included."""
        return [n.id for n in self.nodes.values() if not n.flags & FLAG_HANDSHAKE]

    def reachable_ids(self) -> list[str]:
        """Other nodes the job layer may replicate to / ask for jobs: known, with an
        address, not PFAIL/FAIL, not leaving (SPEC §8: a leaving node refuses
        REPLJOB). Myself excluded."""
        return [n.id for n in self.nodes.values() if not n.flags & _UNREACHABLE]

    def alone(self) -> bool:
        """No other node answers us: none known yet, none answered since we
        started (a table reloaded from nodes.conf), or every one is failing.
        cluster-seeds (server/seeds.py) meets its seeds again while alone."""
        for n in self.nodes.values():
            if n.pong_received and not n.flags & _UNREACHABLE & ~FLAG_LEAVING:
                return False
        return True

    def _input(self) -> None:
        """An input that may change a node's flags, the table or our id."""
        self._reachable = None

    def reachable_sorted(self) -> tuple[str, ...]:
        """:meth:`reachable_ids` sorted (a stable order for seeded choices), cached
        until the next input: the job layer asks for it on every ADDJOB."""
        r = self._reachable
        if r is None:
            r = self._reachable = tuple(sorted(
                n.id for n in self.nodes.values() if not n.flags & _UNREACHABLE))
        return r

    def node(self, node_id: str) -> ClusterNode | None:
        return self.nodes.get(node_id)

    def _priority(self, node: ClusterNode) -> int:
        f = node.flags
        if f & (FLAG_FAIL | FLAG_LEAVING):
            return 100
        if f & FLAG_PFAIL:
            return 10
        if not f & FLAG_MYSELF and not node.link:
            return 5
        return 1

    def hello_entries(self) -> list[tuple[str, str, int, int]]:
        """HELLO: (id, ip, port, priority) for every known node, myself first.
        Priority (SPEC §4): 1 ok, 5 no link, 10 PFAIL, 100 FAIL or leaving."""
        out = [(self.myself.id, self.myself.ip, self.myself.port,
                self._priority(self.myself))]
        for n in self.nodes.values():
            if n.flags & (FLAG_MYSELF | FLAG_HANDSHAKE | FLAG_NOADDR):
                continue
            out.append((n.id, n.ip, n.port, self._priority(n)))
        return out

    def nodes_lines(self) -> list[str]:
        """CLUSTER NODES: ``id ip:port flags ping_sent pong_recv connected|disconnected``,
        myself first, then by id."""
        lines = []
        for n in [self.myself] + sorted(
                (n for n in self.nodes.values() if n is not self.myself),
                key=lambda n: n.id):
            connected = n is self.myself or n.link
            lines.append(
                f"{n.id} {n.ip}:{n.port} {flags_to_names(n.flags & ~FLAG_MEET)} "
                f"{n.ping_sent} {n.pong_received} "
                f"{'connected' if connected else 'disconnected'}")
        return lines

    def cluster_info(self) -> dict[str, Any]:
        known = [n for n in self.nodes.values() if not n.flags & FLAG_HANDSHAKE]
        return {
            "cluster_state": "ok",
            "cluster_known_nodes": len(known),
            "cluster_reachable_nodes": len(self.reachable_ids()),
            "cluster_size": sum(1 for n in known if not n.flags & FLAG_NOADDR),
            "cluster_stats_messages_sent": self.stats_sent,
            "cluster_stats_messages_received": self.stats_received,
        }

    # -- nodes.conf --------------------------------------------------------------------------

    def to_nodes_conf(self) -> str:
        """SPEC §1: "own node id, known nodes, their addresses, flags". One line per
        node ``id ip:port@bus_port flags``; handshake nodes are not saved, nor PFAIL
        (a fresh start re-measures it)."""
        lines = ["# Disquette cluster state, rewritten on every change. Do not edit."]
        for n in [self.myself] + [n for n in self.nodes.values() if n is not self.myself]:
            if n.flags & FLAG_HANDSHAKE:
                continue
            flags = n.flags & (FLAG_MYSELF | FLAG_FAIL | FLAG_NOADDR | FLAG_LEAVING)
            lines.append(f"{n.id} {n.ip}:{n.port}@{n.bus_port} {flags_to_names(flags)}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_nodes_conf(cls, text: str, *, ip: str, port: int, bus_port: int,
                        rng: random.Random, node_timeout: int = 15000,
                        now: int = 0) -> "Membership":
        """Rebuild the table saved by :meth:`to_nodes_conf`. Our own address comes
        from the current config (announce settings may have changed); an empty
        ``ip`` keeps the saved one. Raises ValueError naming the bad line."""
        names = {name: bit for bit, name in
                 ((FLAG_MYSELF, "myself"), (FLAG_FAIL, "fail"), (FLAG_NOADDR, "noaddr"),
                  (FLAG_LEAVING, "leaving"), (FLAG_PFAIL, "pfail"),
                  (FLAG_HANDSHAKE, "handshake"))}
        entries = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            try:
                if len(parts) < 3:
                    raise ValueError("expected 'id ip:port@bus_port flags'")
                nid, addr, flagtext = parts[0], parts[1], parts[2]
                if not is_node_id(nid):
                    raise ValueError(f"bad node id {nid!r}")
                hostport, at, busp = addr.rpartition("@")
                nip, colon, nport = hostport.rpartition(":")
                if not at or not colon:
                    raise ValueError(f"bad address {addr!r}")
                nport_i, busp_i = int(nport), int(busp)
                flags = 0
                if flagtext != "noflags":
                    for name in flagtext.split(","):
                        if name not in names:
                            raise ValueError(f"unknown flag {name!r}")
                        flags |= names[name]
            except ValueError as exc:
                raise ValueError(f"nodes.conf line {lineno}: {exc}") from None
            entries.append((nid, nip, nport_i, busp_i, flags))
        mine = [e for e in entries if e[4] & FLAG_MYSELF]
        if len(mine) != 1:
            raise ValueError("nodes.conf: exactly one 'myself' line expected")
        my_id, my_ip, _, _, my_flags = mine[0]
        m = cls(my_id, ip or my_ip, port, bus_port, node_timeout=node_timeout,
                rng=rng, now=now)
        m.myself.flags |= my_flags & FLAG_LEAVING
        for nid, nip, peer_port, peer_bus_port, flags in entries:
            if nid == my_id or flags & FLAG_HANDSHAKE or nid in m.nodes:
                continue
            node = ClusterNode(nid, nip, peer_port, peer_bus_port,
                               flags & (FLAG_FAIL | FLAG_NOADDR | FLAG_LEAVING), now)
            m.nodes[nid] = node
        return m

    @classmethod
    def bootstrap(cls, saved: str | None, *, ip: str, port: int, bus_port: int,
                  rng: random.Random, node_timeout: int = 15000,
                  now: int = 0) -> "Membership":
        """A node's table at start: the one saved in nodes.conf (same id, same
        peers), or, with no saved text (first start), a fresh one with a new
        random id (SPEC §1). The one way every node starts: the process, the
        in-process node, the simulator's nodes."""
        if saved and saved.strip():
            return cls.from_nodes_conf(saved, ip=ip, port=port, bus_port=bus_port, rng=rng,
                                       node_timeout=node_timeout, now=now)
        return cls(random_node_id(rng), ip, port, bus_port, node_timeout=node_timeout,
                   rng=rng, now=now)
