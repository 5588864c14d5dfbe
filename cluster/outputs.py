# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the cluster layer hands its shells, and the one thing they hand back.

The membership (cluster/membership.py) and the job layer (cluster/cluster.py)
return these; the output driver (server/driver.py) and the simulator
(cluster/sim.py) carry them out. ``Link`` is the input side: where a bus
message came from, as the shell saw the socket. Compiled with the core
(setup.py): ``Send`` is on the per-job path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.bus import BusMessage

__all__ = [
    "Link", "Send", "DropLink", "SaveConfig", "NodeEvent",
    "NODE_ADDED", "NODE_DELETED", "NODE_PFAIL", "NODE_FAIL", "NODE_RECOVERED",
    "NODE_LEAVING", "NODE_ADDRESS", "MYSELF_ID",
]


# -- inputs ------------------------------------------------------------------------

@dataclass(slots=True, frozen=True)
class Link:
    """Where a bus message came from, as the shell saw the socket."""

    peer_ip: str = ""      # the remote address (used when the sender announces no ip)
    local_ip: str = ""     # our address on that socket (learnt as our ip on MEET)
    node_id: str | None = None   # outbound links: the node id we dialled


# -- outputs -------------------------------------------------------------------------

class Send:
    """Send ``msg`` to ``node_id``; connect to (ip, bus_port) if there is no link.
    The same message object may be the payload of many Sends (broadcast): encode it
    once. Not to be changed once made.

    One is made per peer per event-loop turn that sends it anything: a plain
    class rather than a frozen dataclass (whose ``__init__`` sets each field
    through ``object.__setattr__``: several thousand instructions a Send), a
    native class with C fields in the compiled build (setup.py). Equality,
    hash and repr are a frozen dataclass's."""

    __slots__ = ("node_id", "ip", "bus_port", "msg")

    def __init__(self, node_id: str, ip: str, bus_port: int, msg: BusMessage) -> None:
        self.node_id = node_id
        self.ip = ip
        self.bus_port = bus_port
        self.msg = msg

    def _fields(self) -> tuple[str, str, int, BusMessage]:
        return (self.node_id, self.ip, self.bus_port, self.msg)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Send):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "Send(node_id=%r, ip=%r, bus_port=%r, msg=%r)" % self._fields()


@dataclass(slots=True, frozen=True)
class DropLink:
    """Close the outbound link to ``node_id``. ``forget``: the node left the table,
    do not reconnect; otherwise the link looked stale (no pong for node_timeout/2
    while pings are pending) and the next Send should reconnect."""

    node_id: str
    forget: bool


@dataclass(slots=True, frozen=True)
class SaveConfig:
    """Write ``text`` to ``cluster-config-file`` (atomically: temp file + rename)."""

    text: str


NODE_ADDED = "added"          # a real node joined the table
NODE_DELETED = "deleted"      # forgotten, reset, lost its address slot...
NODE_PFAIL = "pfail"
NODE_FAIL = "fail"            # detail: ("quorum", reporters, size) or ("msg", sender)
NODE_RECOVERED = "recovered"  # PFAIL/FAIL cleared: it answered
NODE_LEAVING = "leaving"      # detail: bool
NODE_ADDRESS = "address"      # address changed (or lost: NOADDR)
MYSELF_ID = "myid"            # RESET HARD gave us a new id


@dataclass(slots=True, frozen=True)
class NodeEvent:
    kind: str
    node_id: str
    detail: Any = None
