# compiled: mypyc (setup.py builds each module whose first line this is)
"""Cluster bus wire format (no I/O).

SPEC.md §8: "Full mesh over the bus. ... PING/PONG carry the sender's view and a few
gossip entries." Every bus message, whatever its type, travels in one frame:

    frame = 4-byte big-endian body length + msgpack body
    body  = [version, type, sender, ip, port, bus_port, flags, gossip, payload]

``version`` is the bus protocol version the frame is written in: the one its
link settled (see "Versions" below).

The header (everything but ``payload``) is the same for every type so a receiver
always learns who is talking, where it can be reached (the *announced* address:
``cluster-announce-ip``/``-port``/``-bus-port`` when set, SPEC §1) and whether it is
leaving. ``gossip`` is a list of :class:`GossipEntry` (only PING, PONG and MEET fill
it); ``payload`` is type specific (see the table next to the type constants) and is
any msgpack value: str ids, ints, dicts, and ``bytes`` for job bodies (``bin`` type,
so binary bodies and text ids never get mixed up). A ``BATCH`` message carries the
job-layer messages queued for one node during one event-loop turn under a single
header (see :data:`BATCH`, :func:`unbatch`).

:class:`FrameReader` is sans-IO: the bus shell feeds it whatever bytes arrive and
iterates the complete messages. Anything that is not a well-formed frame raises
:class:`BusProtocolError`; the shell then closes that one link (the peer is broken or
speaks another protocol), never the node.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from typing import Any, Callable, Final, Iterator, NamedTuple

import msgpack

from disquette import job_record as field
from protocol.build import EXTENSIONS


class _NotBuilt(Exception):
    """bus_c's exceptions where it is not built (never raised)."""


if EXTENSIONS:
    try:
        from protocol.bus_c import Codec as _C_CODEC
        from protocol.bus_c import InvalidBody as _C_INVALID_BODY
        from protocol.bus_c import Unsupported as _C_UNSUPPORTED
    except ImportError:     # not built (a source checkout without a compiler step)
        _C_CODEC = None
        _C_INVALID_BODY = _C_UNSUPPORTED = _NotBuilt
else:
    _C_CODEC = None
    _C_INVALID_BODY = _C_UNSUPPORTED = _NotBuilt

__all__ = [
    "PROTOCOL_VERSION", "BUS_VERSION_MIN", "BUS_VERSION_MAX", "VERSIONS_SHIFT",
    "versions_flags", "versions_said", "settled_version", "BusVersionError",
    "DEFAULT_MAX_FRAME_SIZE", "BusProtocolError", "BusMessage",
    "GossipEntry", "BusCodec", "FrameReader", "encode_frame", "encode_body", "decode_body",
    "unbatch",
    "TYPE_NAMES", "FLAG_NAMES", "flags_to_names",
    "PING", "PONG", "MEET", "FAIL", "REPLJOB", "YOURJOBS", "GOTJOB", "ENQUEUE",
    "NEEDJOBS", "SETACK", "GOTACK", "DELJOB", "WORKING", "WILLQUEUE", "QUEUED", "PAUSE",
    "BATCH", "FIRST_JOB_TYPE",
    "FLAG_MYSELF", "FLAG_PFAIL", "FLAG_FAIL", "FLAG_HANDSHAKE", "FLAG_NOADDR",
    "FLAG_LEAVING", "FLAG_MEET", "WIRE_FLAGS",
    "AUTH_NONCE_SIZE", "AUTH_TAG_SIZE", "AUTH_HELLO", "AUTH_PROOF", "AUTH_ACCEPT",
    "AuthMessage", "encode_auth", "decode_auth", "auth_proof", "session_keys",
    "FrameSigner", "frame_mac", "frame_tag",
]

# -- versions ---------------------------------------------------------------------
# Each link settles the version both ends speak (ext). A node says which
# versions it speaks in the flags of every header, above the node flags: the
# highest in bits 8-15, the lowest in bits 16-23. A node that speaks only
# version 1 says nothing there, as every release before versions were settled
# (which reads only FLAG_LEAVING of the header flags and ignores the other
# bits): no bits mean 1 to 1. Until a node has heard the peer of a link, it
# writes its frames in the lowest version it speaks; once it has, in the
# highest both speak (settled_version); it forgets it when the link goes down
# (the peer may come back as another release). Frames of a version this node
# does not speak, or from a node whose versions and ours do not overlap, are
# refused (BusVersionError: the link is closed, saying both ranges), never
# read as malformed. What every version keeps, so that a node can tell a
# peer's versions whatever its layout: a body is an array whose first item is
# its version and whose seventh item is the flags.
#
# Version 2: version 1's layout, with the versions said in the flags. A change
# of the layout or of a payload takes the next version, written only on the
# links that settled it.

#: The versions this node speaks.
BUS_VERSION_MIN: Final = 1
BUS_VERSION_MAX: Final = 2
#: The version of every frame of a link not settled yet: what every release reads.
PROTOCOL_VERSION: Final = BUS_VERSION_MIN
#: Where the versions spoken sit in the header flags; below it, the node flags.
VERSIONS_SHIFT: Final = 8
_VERSION_BITS: Final = 0xFF


def versions_flags(lo: int, hi: int) -> int:
    """The header flags that say a node speaks versions ``lo`` to ``hi``
    (none for 1 to 1, as the releases before versions were settled)."""
    if hi <= 1:
        return 0
    return (hi | lo << 8) << VERSIONS_SHIFT


def versions_said(flags: int) -> tuple[int, int]:
    """The versions (lowest, highest) a header's flags say the sender speaks."""
    said = flags >> VERSIONS_SHIFT
    if not said:
        return (1, 1)
    return ((said >> 8) & _VERSION_BITS, said & _VERSION_BITS)


def settled_version(flags: int, lo: int = BUS_VERSION_MIN, hi: int = BUS_VERSION_MAX) -> int:
    """The version a link settles on with the sender of a header whose flags
    are ``flags``, for a node that speaks ``lo`` to ``hi``: the highest both
    speak, 0 when none."""
    peer_lo, peer_hi = versions_said(flags)
    version = hi if hi < peer_hi else peer_hi
    return version if version >= lo and version >= peer_lo else 0


#: A frame carries at most one bus message; the biggest legitimate ones are REPLJOB /
#: YOURJOBS with job bodies up to ``proto-max-bulk-len`` (512 MB by default, as in
#: Redis), so the default limit leaves room for that plus the header. The shell may
#: pass a smaller one.
DEFAULT_MAX_FRAME_SIZE = 512 * 1024 * 1024 + 1024 * 1024

_LEN: Final = struct.Struct(">I")
# Frames up to this size are decoded from a copy of their body (FrameReader).
_COPY_MAX: Final = 64 * 1024
_HEX40 = re.compile(r"[0-9a-f]{40}\Z")

# -- message types --------------------------------------------------------------
# (Final: the compiled build inlines them where they are used.)
# Membership / failure detection (cluster/membership.py). Payloads:
#   PING, MEET  the node id the sender believes it is talking to (str) or None
#   PONG        echo of the PING/MEET payload: lets the pinger finish a handshake
#               (learn the real id behind a temporary one) or notice that another
#               node now answers at that address, without tracking link identity
#   FAIL        the id of the node the sender just flagged FAIL (SPEC §8)
PING: Final = 1
PONG: Final = 2
MEET: Final = 3
FAIL: Final = 4
# Job layer (cluster/replication.py, requeue.py, acks.py, federation.py, SPEC §8);
# payloads are defined by those modules.
REPLJOB: Final = 10     # job + nodes that may have it: "please hold a copy"
GOTJOB: Final = 11      # "I hold a copy of job id"
YOURJOBS: Final = 12    # federation: jobs moved to the asking node
NEEDJOBS: Final = 13    # federation: queue, count
ENQUEUE: Final = 14     # ask a holder to queue a job
SETACK: Final = 15      # ack GC: job id + may-have count
GOTACK: Final = 16      # ack GC: job id + known
DELJOB: Final = 17      # ack GC / FASTACK / sync timeout: delete a job
WORKING: Final = 18     # postpone the requeue on the other holders
WILLQUEUE: Final = 19   # "I will re-queue job id in 500 ms"
QUEUED: Final = 20      # "I queued job id" (holders that also have it queued may dequeue)
PAUSE: Final = 21       # PAUSE ... bcast: queue + pause state
# Several job-layer messages for one node, sent in the same event-loop turn, in one
# frame (one header, one encode, one decode): the payload is the flat list
# [type1, payload1, type2, payload2, ...] of job-layer messages (never BATCH or a
# membership type), handled in order as if each had come in its own frame.
BATCH: Final = 22
#: Types from here on are the job layer's (the membership reads only their header).
FIRST_JOB_TYPE: Final = REPLJOB

TYPE_NAMES = {
    PING: "ping", PONG: "pong", MEET: "meet", FAIL: "fail", REPLJOB: "repljob",
    GOTJOB: "gotjob", YOURJOBS: "yourjobs", NEEDJOBS: "needjobs",
    ENQUEUE: "enqueue", SETACK: "setack", GOTACK: "gotack", DELJOB: "deljob",
    WORKING: "working", WILLQUEUE: "willqueue", QUEUED: "queued", PAUSE: "pause",
    BATCH: "batch",
}

# -- node flags -------------------------------------------------------------------
# The same bits are used in the node table (cluster/membership.py), in the header
# (sender flags: only LEAVING is meaningful there) and in gossip entries (the
# sender's view of that node: PFAIL, FAIL, LEAVING, NOADDR).
# (Final: C constants in the compiled build, not a lookup in this module's
# globals wherever they are used.)
FLAG_MYSELF: Final = 1
FLAG_PFAIL: Final = 2
FLAG_FAIL: Final = 4
FLAG_HANDSHAKE: Final = 8
FLAG_NOADDR: Final = 16
FLAG_LEAVING: Final = 32
FLAG_MEET: Final = 64       # local only: the first contact of a handshake is a MEET
WIRE_FLAGS: Final = FLAG_PFAIL | FLAG_FAIL | FLAG_NOADDR | FLAG_LEAVING

#: CLUSTER NODES names, in the order Disque prints them.
FLAG_NAMES = (
    (FLAG_MYSELF, "myself"), (FLAG_PFAIL, "pfail"), (FLAG_FAIL, "fail"),
    (FLAG_HANDSHAKE, "handshake"), (FLAG_NOADDR, "noaddr"), (FLAG_LEAVING, "leaving"),
)


def flags_to_names(flags: int) -> str:
    """``myself,pfail`` style list (``noflags`` when none), as CLUSTER NODES shows."""
    names = [name for bit, name in FLAG_NAMES if flags & bit]
    return ",".join(names) if names else "noflags"


class BusProtocolError(ValueError):
    """The peer sent something that is not a valid bus frame: close that link only."""


class BusVersionError(BusProtocolError):
    """The peer writes a version this node does not speak, or speaks none of
    this node's: its link is refused (not a malformed frame). ``sender``: its
    node id as the frame says it ("" if it says none)."""

    def __init__(self, sender: str, peer_lo: int, peer_hi: int, lo: int, hi: int) -> None:
        self.sender = sender
        self.peer_lo, self.peer_hi = peer_lo, peer_hi
        self.lo, self.hi = lo, hi
        super().__init__(
            f"node {sender or '?'} speaks bus protocol {_versions(peer_lo, peer_hi)}, "
            f"this node {_versions(lo, hi)}")

    @property
    def peer_is_newer(self) -> bool:
        return self.peer_lo > self.hi


def _versions(lo: int, hi: int) -> str:
    return f"version {lo}" if lo == hi else f"versions {lo} to {hi}"


class GossipEntry(NamedTuple):
    """One node as the sender sees it. Ages are in ms relative to the sender's clock
    when it built the message (-1: no ping outstanding / never got a pong), so no
    two nodes ever compare absolute clocks."""

    node_id: str
    ip: str
    port: int
    bus_port: int
    flags: int
    ping_sent_age: int
    pong_received_age: int


class BusMessage:
    """A decoded bus message: the common header plus a typed payload.

    A plain class with typed fields rather than a dataclass: the compiled build
    (setup.py) makes it a native class with C fields, which a slots dataclass
    cannot be; equality and repr are a dataclass's."""

    __slots__ = ("type", "sender", "ip", "port", "bus_port", "flags", "gossip", "payload",
                 "malformed")

    def __init__(self, type: int, sender: str, ip: str, port: int, bus_port: int,
                 flags: int = 0, gossip: Any = (), payload: Any = None,
                 malformed: int = 0) -> None:
        self.type = type
        self.sender = sender        # 40 hex chars, the sender's node id
        self.ip = ip                # announced ip, "" when the sender does not know it yet
        self.port = port            # client port
        self.bus_port = bus_port
        self.flags = flags          # sender flags (FLAG_LEAVING)
        self.gossip = gossip        # list[GossipEntry]
        self.payload = payload
        # Job-layer messages whose payload did not have its type's shape, dropped
        # by decode_body (a BATCH keeps its good entries; a single message keeps
        # its header, with payload None): counted by the receiver.
        self.malformed = malformed

    def _fields(self) -> tuple:
        return (self.type, self.sender, self.ip, self.port, self.bus_port, self.flags,
                self.gossip, self.payload, self.malformed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BusMessage):
            return NotImplemented
        return self._fields() == other._fields()

    def __repr__(self) -> str:
        return ("BusMessage(type=%r, sender=%r, ip=%r, port=%r, bus_port=%r, flags=%r, "
                "gossip=%r, payload=%r, malformed=%r)" % self._fields())

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, str(self.type))


# A packer keeps its buffer at the largest body it made, so one that made a
# body bigger than this (a job of many MB) is replaced rather than kept.
_PACKER_KEEP: Final = 1 << 20


class _Head:
    """A header packed once (see BusCodec._packed): the fields it was packed
    from and its bytes."""

    __slots__ = ("sender", "ip", "port", "bus_port", "flags", "packed")

    def __init__(self, msg: BusMessage, packer: Any, version: int) -> None:
        self.sender = msg.sender
        self.ip = msg.ip
        self.port = msg.port
        self.bus_port = msg.bus_port
        self.flags = msg.flags
        # The body's array with a None payload (one byte, 0xc0) packed, less
        # that byte: the 9-element array's head and its first 8 items.
        whole: bytes = packer.pack(
            [version, msg.type, msg.sender, msg.ip, msg.port, msg.bus_port,
             msg.flags, [], None])
        self.packed = whole[:len(whole) - 1]

    def fits(self, msg: BusMessage) -> bool:
        return (msg.sender == self.sender and msg.ip == self.ip and msg.port == self.port
                and msg.bus_port == self.bus_port and msg.flags == self.flags)


class BusCodec:
    """Bus bodies both ways, with what one node keeps from a frame to the next:
    the header it last packed for each message type, the node ids it found
    well formed, and its packer. server/bus.py's ClusterBus reads with one
    (its links' FrameReaders share it) and server/driver.py's OutputDriver
    writes with another; the module's encode_frame, encode_body and
    decode_body make a new one per call (tests, tools).

    The compiled build packs and reads with protocol/bus_c.pyx's Codec
    (msgpack's bytes and values); msgpack does what that one leaves to it
    (bus_c.Unsupported), and all of it in the pure build. A body bus_c finds
    invalid (bus_c.InvalidBody) is the peer's: a BusProtocolError. Any other
    exception from it is a bug of ours, and goes through.

    ``lo``, ``hi``: the bus versions it reads (those of this release; a test
    gives others to play a node of another release)."""

    def __init__(self, lo: int = BUS_VERSION_MIN, hi: int = BUS_VERSION_MAX) -> None:
        self.lo = lo
        self.hi = hi
        # msgpack.packb makes a new Packer per call: half the cost of a small body.
        self.packer: Any = msgpack.Packer(use_bin_type=True)
        # The last header packed for each message type, when it had no gossip
        # (every job-layer message, one per frame): a msgpack array is its head
        # followed by its items, so the body is that header's bytes followed
        # by the packed payload, the same bytes as the whole list packed in
        # one call, with 8 fewer objects to look at per frame. Keyed by type
        # and version (_head_key): links of two versions alternate in a
        # mixed cluster.
        self.heads: dict[int, _Head] = {}
        # Node ids found well formed (the senders, the holders REPLJOB lists:
        # a handful in a cluster), each kept as the first str that carried it:
        # the ids of every frame are not matched again, and a decoded message
        # names a node with that one object, whose hash is known and which
        # compares by identity where the job layer looks ids up (broker/job.py's
        # holder tuples). Bounded (_NODE_IDS_MAX), as what is in it comes from peers.
        self.node_ids: dict[str, str] = {}
        c: Any = _C_CODEC() if _C_CODEC is not None else None
        self.c_pack: Any = c.pack if c is not None else None
        self.c_unpack: Any = c.unpack if c is not None else None

    def _packed(self, msg: BusMessage, framed: bool, version: int) -> bytes:
        """The body (led by its length when ``framed``) in bus version
        ``version``: a header packed before, then the payload; or, with
        gossip, the whole list."""
        if msg.gossip:
            prefix = b""
            value: Any = [version, msg.type, msg.sender, msg.ip, msg.port,
                          msg.bus_port, msg.flags, msg.gossip, msg.payload]
        else:
            key = version << 8 | msg.type
            head = self.heads.get(key)
            if head is None or not head.fits(msg):
                head = self.heads[key] = _Head(msg, self.packer, version)
            prefix = head.packed
            value = msg.payload
        c_pack = self.c_pack
        if c_pack is not None:
            try:
                packed: bytes = c_pack(prefix, value, framed)
                return packed
            except _C_UNSUPPORTED:
                pass        # msgpack packs it, or raises its own error
        body: bytes = prefix + self.packer.pack(value)
        if len(body) > _PACKER_KEEP:
            self.packer = msgpack.Packer(use_bin_type=True)
        return _LEN.pack(len(body)) + body if framed else body

    def encode_body(self, msg: BusMessage, version: int = PROTOCOL_VERSION) -> bytes:
        """The msgpack body alone (no length prefix)."""
        return self._packed(msg, False, version)

    def encode_frame(self, msg: BusMessage, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                     version: int = PROTOCOL_VERSION) -> bytes:
        """Length-prefixed frame for ``msg`` in bus version ``version`` (its
        link's, cluster/outputs.py Send.version). Encode once and write the
        same bytes to every destination of a broadcast in that version."""
        frame = self._packed(msg, True, version)
        if len(frame) - 4 > max_frame_size:
            raise BusProtocolError(
                f"bus message of {len(frame) - 4} bytes exceeds the {max_frame_size} bytes "
                "frame limit")
        return frame

    def _unpacked(self, body: Any) -> Any:
        """The value a body holds."""
        c_unpack = self.c_unpack
        if c_unpack is not None:
            try:
                return c_unpack(body)
            except _C_UNSUPPORTED:
                pass        # msgpack reads it, or says what is wrong with it
            except _C_INVALID_BODY as exc:
                raise BusProtocolError(f"invalid bus frame body: {exc}") from None
        try:
            return msgpack.unpackb(body, raw=False, use_list=True, strict_map_key=False)
        except (ValueError, TypeError) as exc:  # msgpack's (ExtraData, FormatError...)
            raise BusProtocolError(f"invalid bus frame body: {exc}") from None

    def decode_body(self, body: Any) -> BusMessage:
        """Parse one msgpack body (bytes-like) into a :class:`BusMessage`."""
        return _message(self._unpacked(body), self.node_ids, self.lo, self.hi)


def encode_body(msg: BusMessage, version: int = PROTOCOL_VERSION) -> bytes:
    """BusCodec.encode_body with a codec of its own (tests, tools)."""
    return BusCodec().encode_body(msg, version)


def encode_frame(msg: BusMessage, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 version: int = PROTOCOL_VERSION) -> bytes:
    """BusCodec.encode_frame with a codec of its own (tests, tools)."""
    return BusCodec().encode_frame(msg, max_frame_size, version)


def decode_body(body: Any) -> BusMessage:
    """BusCodec.decode_body with a codec of its own (tests, tools)."""
    return BusCodec().decode_body(body)


def unbatch(msg: BusMessage) -> list[BusMessage]:
    """The messages a BATCH carries, each with the batch's header (for a shell that
    must send them one frame each: a batch over the frame size limit)."""
    if msg.type != BATCH:
        return [msg]
    p = msg.payload
    return [BusMessage(p[i], msg.sender, msg.ip, msg.port, msg.bus_port, msg.flags, [],
                       p[i + 1]) for i in range(0, len(p), 2)]


# -- job-layer payload shapes -------------------------------------------------------
# A peer's payload is checked here, where it is decoded, so that the handlers
# (cluster/*.py) only ever see the shapes they were written for: a malformed one
# is the peer's fault and is dropped, counted; an exception in a handler is ours.
def _job_id(x: Any) -> bool:
    if type(x) is not bytes:
        return False
    jid: bytes = x
    return len(jid) == 40 and jid[0] == 68 and jid[1] == 45     # b"D-..."


def _int(x: Any) -> bool:
    return type(x) is int


_NODE_IDS_MAX: Final = 4096       # node ids a BusCodec keeps (see BusCodec.node_ids)


def _node_id(x: Any, ids: dict[str, str]) -> str | None:
    """``x`` as the one str ``ids`` (a BusCodec's node_ids) keeps for that node
    id, if it is one (40 lowercase hex chars), else None."""
    if type(x) is not str:
        return None
    found = ids.get(x)
    if found is not None:
        return found
    if _HEX40.match(x) is None:
        return None
    if len(ids) >= _NODE_IDS_MAX:
        ids.clear()
    ids[x] = x
    return x


def _list_of(x: Any, check: Callable[[Any], bool]) -> bool:
    """A list whose every item passes ``check``."""
    if type(x) is not list:
        return False
    for item in x:
        if not check(item):
            return False
    return True


def _node_ids(x: Any, known: dict[str, str]) -> bool:
    """None or a list of node ids, each replaced by the str kept for it (a
    loop of its own, not _list_of: REPLJOB checks one per job, and a native
    call per id is cheaper than a call through a function object)."""
    if x is None:
        return True
    if type(x) is not list:
        return False
    ids: list = x
    for i in range(len(ids)):
        nid = _node_id(ids[i], known)
        if nid is None:
            return False
        ids[i] = nid
    return True


def _job_fields(f: Any, ids: dict[str, str]) -> bool:
    """A job's record (disquette/job_record.py), and (ext) the sender's clock
    after it, an int (cluster/replication.py wire_fields)."""
    if type(f) is not list:
        return False
    n = len(f)
    if (n == field.FIELDS + 1 or n == field.KEYED_FIELDS + 1) and type(f[n - 1]) is int:
        n -= 1
    if not ((n == field.FIELDS
             or (n == field.KEYED_FIELDS and _idem_key(f[field.IDEMPOTENCY_KEY])))
            and _job_id(f[field.ID]) and type(f[field.QUEUE]) is bytes
            and type(f[field.BODY]) is bytes):
        return False
    fields: list = f
    # The fields from the state to the additional deliveries, and the requeue
    # time, are ints (a range of C ints: no tuple of boxed indexes).
    for i in range(field.STATE, field.NODES_DELIVERED):
        if type(fields[i]) is not int:
            return False
    if type(fields[field.REQUEUE_TIME]) is not int:
        return False
    # State, flags and REPLICATE: narrow C ints of the compiled Job (broker/job.py).
    if not (0 <= fields[field.STATE] <= field.STATE_MAX
            and 0 <= fields[field.FLAGS] <= field.FLAGS_MAX
            and 0 <= fields[field.REPLICATE] <= field.REPLICATE_MAX):
        return False
    return _node_ids(fields[field.NODES_DELIVERED], ids)


def _idem_key(x: Any) -> bool:
    """(ext) An ADDJOB IDEMPOTENCY key (broker/idempotency.py)."""
    return type(x) is bytes and 0 < len(x) <= field.KEY_MAX_BYTES


def _id_and_int(p: Any) -> bool:
    return type(p) is list and len(p) == 2 and _job_id(p[0]) and type(p[1]) is int


def _queued(p: Any) -> bool:
    return type(p) is list and len(p) == 3 and _job_id(p[0]) and _int(p[1]) and _int(p[2])


def _needjobs(p: Any) -> bool:
    return (type(p) is list and len(p) in (2, 3) and type(p[0]) is bytes
            and _list_of(p[1:], _int))


def _yourjobs(p: Any, ids: dict[str, str]) -> bool:
    if type(p) is not list:
        return False
    for f in p:
        if not _job_fields(f, ids):
            return False
    return True


def _pause(p: Any) -> bool:
    return type(p) is list and len(p) == 2 and type(p[0]) is bytes and _int(p[1])


def _payload_ok(mtype: int, p: Any, ids: dict[str, str]) -> bool:
    """Whether a job-layer payload has its type's shape (a type without one:
    yes). The commonest types first; a chain rather than a table of functions,
    so that the compiled build calls each check natively."""
    if mtype == REPLJOB:
        return _job_fields(p, ids)
    if mtype == GOTJOB or mtype == DELJOB or mtype == WILLQUEUE or mtype == WORKING \
            or mtype == ENQUEUE:
        return _job_id(p)
    if mtype == SETACK or mtype == GOTACK:
        return _id_and_int(p)
    if mtype == QUEUED:
        return _queued(p)
    if mtype == NEEDJOBS:
        return _needjobs(p)
    if mtype == YOURJOBS:
        return _yourjobs(p, ids)
    if mtype == PAUSE:
        return _pause(p)
    return True


def _bad(what: str) -> BusProtocolError:
    return BusProtocolError(f"invalid bus message: {what}")


def _version_error(obj: list, lo: int, hi: int) -> BusVersionError:
    """The refusal of a body (an array led by an int) whose version is not one
    of ``lo`` to ``hi``, or whose flags say versions none of which is: the
    sender and its versions as far as the body says them (every version keeps
    the version first and the flags seventh)."""
    version: int = obj[0]
    sender = obj[2] if len(obj) > 2 and type(obj[2]) is str else ""
    flags = obj[6] if len(obj) > 6 and type(obj[6]) is int else 0
    peer_lo, peer_hi = versions_said(flags) if flags >> VERSIONS_SHIFT else (version, version)
    return BusVersionError(sender[:40], peer_lo, peer_hi, lo, hi)


def _message(obj: Any, ids: dict[str, str], lo: int = BUS_VERSION_MIN,
             hi: int = BUS_VERSION_MAX) -> BusMessage:
    """The message a body's value is (BusCodec.decode_body) for a node that
    reads bus versions ``lo`` to ``hi``, its node ids the ones ``ids`` keeps."""
    if type(obj) is not list or len(obj) != 9:
        if type(obj) is list and obj and obj[0] == AUTH_MAGIC:
            raise BusProtocolError("the peer authenticates its bus links "
                                   "(cluster-auth-pass) and this node does not")
        if type(obj) is list and obj and type(obj[0]) is int and not lo <= obj[0] <= hi:
            raise _version_error(obj, lo, hi)
        raise _bad("body is not a 9-element array")
    version, mtype, sender, ip, port, bus_port, flags, gossip, payload = obj
    if type(version) is not int:
        raise _bad("version is not an integer")
    if version < lo or version > hi or (
            type(flags) is int and (flags >> (VERSIONS_SHIFT + 8)) & _VERSION_BITS > hi):
        raise _version_error(obj, lo, hi)
    if type(mtype) is not int:
        raise _bad("type is not an integer")
    sender = _node_id(sender, ids)
    if sender is None:
        raise _bad("sender is not a 40 hex chars node id")
    if type(ip) is not str or len(ip) > 255:
        raise _bad("ip is not a string")
    if type(port) is not int or not 0 <= port <= 65535:
        raise _bad("port out of range")
    if type(bus_port) is not int or not 0 <= bus_port <= 65535:
        raise _bad("bus port out of range")
    if type(flags) is not int:
        raise _bad("flags is not an integer")
    if type(gossip) is not list:
        raise _bad("gossip is not an array")
    entries = []
    for e in gossip:
        if type(e) is not list or len(e) != 7:
            raise _bad("gossip entry is not a 7-element array")
        gid, gip, gport, gbus, gflags, gping, gpong = e
        gid = _node_id(gid, ids)
        if (gid is None or type(gip) is not str
                or type(gport) is not int or type(gbus) is not int
                or type(gflags) is not int or type(gping) is not int
                or type(gpong) is not int):
            raise _bad("malformed gossip entry")
        entries.append(GossipEntry(gid, gip, gport, gbus, gflags, gping, gpong))
    malformed = 0
    if mtype == BATCH:
        if type(payload) is not list or len(payload) & 1:
            raise _bad("batch payload is not a list of (type, payload) pairs")
        items: list = payload
        n = len(items)
        for i in range(0, n, 2):
            t = items[i]
            if type(t) is not int or t < FIRST_JOB_TYPE or t == BATCH:
                raise _bad("batch entry is not a job-layer message")
        good: list | None = None    # the entries kept, once one is dropped
        for i in range(0, n, 2):
            if _payload_ok(items[i], items[i + 1], ids):
                if good is not None:
                    good += items[i:i + 2]
            else:
                if good is None:
                    good = items[:i]
                malformed += 1
        if good is not None:
            payload = good
    elif not _payload_ok(mtype, payload, ids):
        malformed = 1
        payload = None
    return BusMessage(mtype, sender, ip, port, bus_port, flags, entries, payload, malformed)


class FrameReader:
    """Sans-IO frame splitter: ``feed(data)`` then iterate the complete messages
    (or call ``next_message`` until it returns None).

    A length above ``max_frame_size`` (or zero) raises as soon as the 4-byte prefix
    is in, so a hostile peer cannot make us buffer more than one limit's worth.
    After an error the reader stays broken: the caller must drop the link.

    On an authenticated link (see "Authenticated links" above) the shell reads
    the handshake with :meth:`next_auth`, then calls :meth:`authenticate` with
    the peer's sending key: from there on every frame must carry its tag.

    ``codec``: the node's BusCodec, which decodes the bodies (one of its own
    without it).
    """

    __slots__ = ("_buf", "_pos", "max_frame_size", "_error", "_mac", "_seq", "codec")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 codec: BusCodec | None = None) -> None:
        self.codec = codec if codec is not None else BusCodec()
        self._buf = bytearray()
        self._pos = 0
        self.max_frame_size = max_frame_size
        self._error: BusProtocolError | None = None
        self._mac: Any = None       # hashlib's keyed BLAKE2b (frame_mac), once authenticated
        self._seq = 0

    def authenticate(self, key: bytes) -> None:
        """Every frame from now on (bytes already buffered included) must be
        followed by its tag under ``key``, in sequence."""
        self._mac = frame_mac(key)
        self._seq = 0

    def next_auth(self) -> "AuthMessage | None":
        """The next handshake message, or None while it is incomplete. Anything
        else (a bus message: the peer does not authenticate) raises."""
        if self._error is not None:
            raise self._error
        n = self._complete(0)
        if n is None:
            return None
        start = self._pos + 4
        self._pos = start + n
        try:
            return decode_auth(bytes(self._buf[start:start + n]))
        except BusProtocolError as exc:
            self._error = exc
            raise

    def _complete(self, extra: int) -> int | None:
        """The body length of the next frame if it is all in (with ``extra``
        bytes after it), else None; raises on a length outside the limits."""
        buf, pos = self._buf, self._pos
        if len(buf) - pos < 4:
            return None
        n: int = _LEN.unpack_from(buf, pos)[0]     # typed: compared as a C int below
        if n == 0 or n > self.max_frame_size:
            self._error = BusProtocolError(
                f"bus frame length {n} outside 1..{self.max_frame_size}")
            raise self._error
        return n if len(buf) - pos - 4 >= n + extra else None

    def feed(self, data: Any) -> None:
        if self._error is not None:
            raise self._error
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as messages."""
        return len(self._buf) - self._pos

    def __iter__(self) -> Iterator[BusMessage]:
        return self

    def __next__(self) -> BusMessage:
        msg = self.next_message()
        if msg is None:
            raise StopIteration
        return msg

    def next_message(self) -> BusMessage | None:
        """The next complete message, or None until more bytes come. What
        iterating the reader does, without the StopIteration that ends each
        read's loop (an exception costs the compiled build a traceback)."""
        if self._error is not None:
            raise self._error
        tag_size = AUTH_TAG_SIZE if self._mac is not None else 0
        n = self._complete(tag_size)
        if n is None:
            self._compact()
            return None
        pos = self._pos
        end = pos + 4 + n
        try:
            if n <= _COPY_MAX:
                # A small frame is decoded from a copy of its body: cheaper
                # than a view of the buffer, which must be made and released.
                msg = self._decode(self._buf, pos, end)
            else:
                with memoryview(self._buf) as mv:
                    frame = mv[pos:end + tag_size]
                    try:
                        msg = self._decode(frame, 0, end - pos)
                    finally:
                        frame.release()
        except BusProtocolError as exc:
            self._error = exc
            raise
        self._seq += 1
        self._pos = end + tag_size
        return msg

    def _decode(self, data: Any, pos: int, end: int) -> BusMessage:
        """The frame at data[pos:end] (length prefix and body), followed by its
        tag on an authenticated link."""
        mac = self._mac
        if mac is not None and not hmac.compare_digest(
                frame_tag(mac, self._seq, data[pos:end]), data[end:end + AUTH_TAG_SIZE]):
            raise BusProtocolError(
                f"bus frame {self._seq} fails its authentication tag (forged, "
                "replayed or reordered)")
        return self.codec.decode_body(data[pos + 4:end])

    def _compact(self) -> None:
        # Drop consumed bytes once in a while instead of after every frame: slicing
        # the front of a bytearray is O(remaining).
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0


# -- authenticated links (cluster-auth-pass) ------------------------------------------
# A node with cluster-auth-pass opens every bus link (both directions) with a
# handshake, in frames of the usual layout whose body is
# [AUTH_MAGIC, AUTH_VERSION, kind, ...]:
#
#   both sides at once  HELLO  [magic, 1, "hello", nonce]         32 random bytes each
#   dialer              PROOF  [magic, 1, "proof", [mac, ...]]    one per secret it holds
#   listener            ACCEPT [magic, 1, "accept", index, mac]   which of the dialer's
#                                                                 macs it accepted
#   mac(role) = HMAC-SHA256(secret, "disquette-bus-auth v1 <role>" + nonce_d + nonce_l)
#
# The listener proves itself only to a dialer that proved first, and each side's
# proof covers the other's fresh nonce, so a recorded handshake is worth nothing
# on another link. The secret never travels; during a rotation a node holds two
# (cluster-auth-pass, cluster-auth-pass-previous) and the dialer proves with
# both. Then both sides derive per-direction keys from the secret and both nonces
# (session_keys) and every frame is followed by
#   tag = BLAKE2b-128 keyed with its direction's key (8-byte frame number + frame)
# frames numbered from 0 in each direction: a frame cut from another link fails
# (other keys), and one replayed, dropped or reordered in the same link fails
# (other number). The link is closed on the first bad tag. This authenticates
# and orders frames; it does not hide them (tls-cluster does).
AUTH_MAGIC = "disquette-bus-auth"
AUTH_VERSION = 1
AUTH_NONCE_SIZE = 32
AUTH_TAG_SIZE = 16
AUTH_MAX_SECRETS = 4
AUTH_HELLO = "hello"
AUTH_PROOF = "proof"
AUTH_ACCEPT = "accept"
_SEQ = struct.Struct(">Q")
_MAC_SIZE = 32


class AuthMessage(NamedTuple):
    kind: str
    nonce: bytes = b""           # hello
    macs: tuple = ()             # proof: the dialer's, one per secret
    index: int = 0  # type: ignore[assignment]  # accept: which of the dialer's macs matched
    mac: bytes = b""             # accept: the listener's


def encode_auth(msg: AuthMessage) -> bytes:
    if msg.kind == AUTH_HELLO:
        body = [AUTH_MAGIC, AUTH_VERSION, AUTH_HELLO, msg.nonce]
    elif msg.kind == AUTH_PROOF:
        body = [AUTH_MAGIC, AUTH_VERSION, AUTH_PROOF, list(msg.macs)]
    else:
        body = [AUTH_MAGIC, AUTH_VERSION, AUTH_ACCEPT, msg.index, msg.mac]
    data = msgpack.packb(body, use_bin_type=True)
    return _LEN.pack(len(data)) + data


def decode_auth(body) -> AuthMessage:
    try:
        obj = msgpack.unpackb(body, raw=False, use_list=True)
    except Exception as exc:
        raise BusProtocolError(f"invalid bus frame body: {exc}") from None
    if type(obj) is not list or len(obj) < 4 or obj[0] != AUTH_MAGIC:
        raise BusProtocolError(
            "the peer sent a bus message without authenticating: it has no "
            "cluster-auth-pass, or another one")
    if obj[1] != AUTH_VERSION:
        raise BusProtocolError(f"unsupported bus authentication version {obj[1]!r}")
    kind = obj[2]
    if kind == AUTH_HELLO and len(obj) == 4 and type(obj[3]) is bytes \
            and len(obj[3]) == AUTH_NONCE_SIZE:
        return AuthMessage(AUTH_HELLO, nonce=obj[3])
    if kind == AUTH_PROOF and len(obj) == 4 and type(obj[3]) is list \
            and 0 < len(obj[3]) <= AUTH_MAX_SECRETS \
            and all(type(m) is bytes and len(m) == _MAC_SIZE for m in obj[3]):
        return AuthMessage(AUTH_PROOF, macs=tuple(obj[3]))
    if kind == AUTH_ACCEPT and len(obj) == 5 and type(obj[3]) is int \
            and 0 <= obj[3] < AUTH_MAX_SECRETS and type(obj[4]) is bytes \
            and len(obj[4]) == _MAC_SIZE:
        return AuthMessage(AUTH_ACCEPT, index=obj[3], mac=obj[4])
    raise BusProtocolError(f"malformed bus authentication message {kind!r}")


def auth_proof(secret: str, role: str, nonce_dialer: bytes, nonce_listener: bytes) -> bytes:
    """What a side sends to prove it holds ``secret`` (role: "dialer" or "listener")."""
    return hmac.digest(secret.encode("utf-8", "surrogateescape"),
                       b"disquette-bus-auth v1 " + role.encode() + nonce_dialer
                       + nonce_listener, "sha256")


def session_keys(secret: str, nonce_dialer: bytes, nonce_listener: bytes
                 ) -> tuple[bytes, bytes]:
    """(dialer -> listener key, listener -> dialer key) of one link."""
    master = hmac.digest(secret.encode("utf-8", "surrogateescape"),
                         b"disquette-bus-auth v1 session" + nonce_dialer + nonce_listener,
                         "sha256")
    return (hmac.digest(master, b"dialer->listener", "sha256"),
            hmac.digest(master, b"listener->dialer", "sha256"))


def frame_mac(key: bytes):
    """The keyed MAC frames of one direction are tagged with: BLAKE2b in its
    keyed mode (a MAC by design; cheaper than HMAC-SHA256 per frame), set up
    once per link and copied per frame."""
    return hashlib.blake2b(key=key, digest_size=AUTH_TAG_SIZE)


def frame_tag(mac, seq: int, frame) -> bytes:
    """The tag that follows frame number ``seq`` (length prefix included);
    ``mac`` comes from :func:`frame_mac`."""
    h = mac.copy()
    h.update(_SEQ.pack(seq))
    h.update(frame)
    return h.digest()


class FrameSigner:
    """The sending side of an authenticated link: the tag of each frame, in order."""

    __slots__ = ("mac", "seq")

    def __init__(self, key: bytes) -> None:
        self.mac = frame_mac(key)
        self.seq = 0

    def tag(self, frame) -> bytes:
        tag = frame_tag(self.mac, self.seq, frame)
        self.seq += 1
        return tag
