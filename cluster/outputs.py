# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the cluster layer hands its shells, and the one thing they hand back.

The membership (cluster/membership.py) and the job layer (cluster/cluster.py)
return these; the output driver (server/driver.py) and the simulator
(server/sim/simulation.py) carry them out. ``Link`` is the input side: where a bus
message came from, as the shell saw the socket. Compiled with the core
(setup.py): ``Send`` is on the per-job path.

Each is a plain class with ``__slots__``, not a frozen dataclass, whose
``__init__`` sets each field through ``object.__setattr__``: compiled, making
a Send costs about 2,300 instructions, a DropLink (two fields) about 5,000
and a NodeEvent (three) about 6,100 as frozen dataclasses (callgrind, from
Python). A native class with C fields in the compiled build; equality, hash
and repr are a frozen dataclass's. Not to be changed once made.
"""

from __future__ import annotations

from typing import Any

from protocol.bus import BusMessage

__all__ = [
    "Link", "Send", "DropLink", "SaveConfig", "NodeEvent",
    "NODE_ADDED", "NODE_DELETED", "NODE_PFAIL", "NODE_FAIL", "NODE_RECOVERED",
    "NODE_LEAVING", "NODE_ADDRESS", "MYSELF_ID",
]


class _Value:
    """Equality and hash by the fields (``_fields()``)."""

    __slots__ = ()

    def _fields(self) -> tuple:
        return ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _Value)
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())


# -- inputs ------------------------------------------------------------------------

class Link(_Value):
    """Where a bus message came from, as the shell saw the socket."""

    __slots__ = ("peer_ip", "local_ip", "node_id")

    def __init__(self, peer_ip: str = "", local_ip: str = "",
                 node_id: str | None = None) -> None:
        self.peer_ip = peer_ip      # the remote address (used when the sender announces no ip)
        self.local_ip = local_ip    # our address on that socket (learnt as our ip on MEET)
        self.node_id = node_id      # outbound links: the node id we dialled

    def _fields(self) -> tuple:
        return (self.peer_ip, self.local_ip, self.node_id)

    def __repr__(self) -> str:
        return "Link(peer_ip=%r, local_ip=%r, node_id=%r)" % self._fields()


# -- outputs -------------------------------------------------------------------------

class Send(_Value):
    """Send ``msg`` to ``node_id`` in bus version ``version`` (the one its link
    settled: protocol/bus.py "Versions"); connect to (ip, bus_port) if there is
    no link. The same message object may be the payload of many Sends
    (broadcast): encode it once per version. One is made per peer per
    event-loop turn that sends it anything."""

    __slots__ = ("node_id", "ip", "bus_port", "msg", "version")

    def __init__(self, node_id: str, ip: str, bus_port: int, msg: BusMessage,
                 version: int) -> None:
        self.node_id = node_id
        self.ip = ip
        self.bus_port = bus_port
        self.msg = msg
        self.version = version

    def _fields(self) -> tuple:
        return (self.node_id, self.ip, self.bus_port, self.msg, self.version)

    def __repr__(self) -> str:
        return "Send(node_id=%r, ip=%r, bus_port=%r, msg=%r, version=%r)" % self._fields()


class DropLink(_Value):
    """Close the outbound link to ``node_id``. ``forget``: the node left the table,
    do not reconnect; otherwise the link looked stale (no pong for node_timeout/2
    while pings are pending) and the next Send should reconnect."""

    __slots__ = ("node_id", "forget")

    def __init__(self, node_id: str, forget: bool) -> None:
        self.node_id = node_id
        self.forget = forget

    def _fields(self) -> tuple:
        return (self.node_id, self.forget)

    def __repr__(self) -> str:
        return "DropLink(node_id=%r, forget=%r)" % self._fields()


class SaveConfig(_Value):
    """Write ``text`` to ``cluster-config-file`` (atomically: temp file + rename)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def _fields(self) -> tuple:
        return (self.text,)

    def __repr__(self) -> str:
        return "SaveConfig(text=%r)" % self._fields()


NODE_ADDED = "added"          # a real node joined the table
NODE_DELETED = "deleted"      # forgotten, reset, lost its address slot...
NODE_PFAIL = "pfail"
NODE_FAIL = "fail"            # detail: ("quorum", reporters, size) or ("msg", sender)
NODE_RECOVERED = "recovered"  # PFAIL/FAIL cleared: it answered
NODE_LEAVING = "leaving"      # detail: bool
NODE_ADDRESS = "address"      # address changed (or lost: NOADDR)
MYSELF_ID = "myid"            # RESET HARD gave us a new id


class NodeEvent(_Value):
    __slots__ = ("kind", "node_id", "detail")

    def __init__(self, kind: str, node_id: str, detail: Any = None) -> None:
        self.kind = kind
        self.node_id = node_id
        self.detail = detail

    def _fields(self) -> tuple:
        return (self.kind, self.node_id, self.detail)

    def __repr__(self) -> str:
        return "NodeEvent(kind=%r, node_id=%r, detail=%r)" % self._fields()
