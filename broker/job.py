# compiled: mypyc (setup.py builds each module whose first line this is)
"""Jobs: the unit of work, their ids and their states (SPEC sections 2 and 3).

Ids, queue names and bodies are kept as ``bytes`` from the wire to the reply:
no decoding on the hot path, and bytes take less memory than str.

Times inside a Job are integer milliseconds of the node's clock, except ``ctime``
which is Disque's ``ms * 1_000_000 + counter`` ordering key.
"""

from __future__ import annotations

from typing import Final, Iterable

from binascii import b2a_base64

from mypy_extensions import i16, i32, mypyc_attr, u8

from disquette import job_record as field

# Job states, in SPEC order. The index is what SHOW and JSCAN print.
WAIT_REPL: Final = 0
ACTIVE: Final = 1
QUEUED: Final = 2
ACKED: Final = 3
HELD: Final = 4        # (ext) ADDJOB ... HOLD: live, never queued until an ENQUEUE releases it
STATE_NAMES = (b"wait-repl", b"active", b"queued", b"acked", b"held")
STATE_BY_NAME = {name: i for i, name in enumerate(STATE_NAMES)}

JOB_ID_LEN: Final = 40
# Defaults of SPEC section 3.
DEFAULT_TTL: Final = 86400
DEFAULT_RETRY_MAX: Final = 300

# Job flags (small bit set, one slot).
FLAG_BCAST_WILLQUEUE: Final = 1  # WILLQUEUE already sent for the current requeue time
FLAG_DELIVERED: Final = 2        # given to a client at least once (RETRY 0 eviction)
FLAG_DUMMY_ACK: Final = 4        # ack for an id we never held (ACKJOB of an unknown id)
FLAG_BCAST_QUEUED: Final = 8     # (cluster) we told holders we queued it
FLAG_QUEUED_ONCE: Final = 16     # queued here before: ENQUEUE again is an additional delivery
# (ext) Added with HOLD and not released yet. The state says so once the job is
# live (HELD); the flag is what REPLJOB carries while the origin's copy still
# waits for replication (its state is wait-repl then).
FLAG_HELD: Final = 32
# (ext) this node answered a retried ADDJOB (IDEMPOTENCY) with this copy's id: the
# producer holds the id, so a DELJOB of the unacked copy (its originator's failed
# add) no longer deletes it (cluster/acks.py)
FLAG_KEY_ANSWERED: Final = 128

BADID: Final = "BADID Invalid Job ID format."


def valid_job_id(jid: bytes) -> bool:
    """Disque's validateJobID: the shape only, cheap enough for every id."""
    return (
        len(jid) == JOB_ID_LEN
        and jid[0] == 68  # 'D'
        and jid[1] == 45  # '-'
        and jid[10] == 45
        and jid[35] == 45
    )


def random_node_id(rng) -> str:
    """SPEC §1: "Node ids are 40 lowercase hex chars, random at first start"
    (``rng``: the injected random.Random)."""
    return "%040x" % rng.getrandbits(160)


def make_job_id(node_id: str, rnd144: int, ttl: int, retry: int) -> bytes:
    """D-<8 hex of node id>-<24 base64 chars of 144 random bits>-<4 hex TTL minutes>.

    The last nibble's low bit tells other nodes whether the job is at-least-once
    (RETRY > 0: odd) or at-most-once (even), so an ACKJOB for an unknown id
    knows whether a dummy ack is worth creating.
    """
    # b2a_base64 is what base64.b64encode runs, without its Python frame;
    # 18 bytes make exactly 24 chars, no padding. Concatenation, not a %-format
    # (which parses its format string every time).
    return (id_prefix(node_id) + b2a_base64(rnd144.to_bytes(18, "big"), newline=False)
            + id_suffix(ttl, retry))


# How many ids JobIds draws at once: one call for the random bytes of this
# many ids, one translation of them into base64 chars.
ID_BATCH: Final = 256
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
# A random byte -> a base64 char from its low 6 bits (uniform: 256 = 4 x 64).
_B64_OF_BYTE: Final = bytes(_B64[b & 63] for b in range(256))


class JobIds:
    """The ids of the jobs one node creates (make_job_id's format), their random
    parts drawn ID_BATCH at a time from the node's random source, a char of
    6 random bits per random byte (``bytes.translate``, a C loop): per id, a
    slice and a concatenation instead of a big integer, its bytes and their
    encoding (about a tenth of a compiled ADDJOB)."""

    def __init__(self, rng) -> None:
        self.rng = rng                  # random.Random (injected, seeded in the simulator)
        self.chars = b""                # ID_BATCH x 24 random base64 chars
        self.pos = 0
        self.node_id = ""
        self.prefix = b""
        # the last (TTL, RETRY > 0) asked for and its suffix: a producer's
        # jobs mostly share both
        self.ttl = -1
        self.retry = False
        self.suffix = b""

    def new(self, node_id: str, ttl: int, retry: int) -> bytes:
        pos = self.pos
        if pos >= len(self.chars):
            # (A process's rng gives the OS's random bytes: server/process.py.)
            self.chars = self.rng.randbytes(24 * ID_BATCH).translate(_B64_OF_BYTE)
            pos = 0
        self.pos = pos + 24
        if node_id != self.node_id:     # CLUSTER RESET HARD takes a new id
            self.node_id = node_id
            self.prefix = id_prefix(node_id)
        if ttl != self.ttl or (retry != 0) != self.retry:
            self.ttl = ttl
            self.retry = retry != 0
            self.suffix = id_suffix(ttl, retry)
        return self.prefix + self.chars[pos:pos + 24] + self.suffix


def id_prefix(node_id: str) -> bytes:
    """b"D-<8 hex of node id>-" (see make_job_id; JobIds keeps its node's)."""
    return b"D-" + node_id[:8].encode() + b"-"


def id_suffix(ttl: int, retry: int) -> bytes:
    """b"-<4 hex TTL minutes>", the last bit telling RETRY > 0 (see make_job_id;
    JobIds keeps the last one it made)."""
    ttl_min = ttl // 60
    if ttl_min > 0xFFFF:
        ttl_min = 0xFFFF
    if retry:
        ttl_min |= 1
    else:
        ttl_min &= 0xFFFE
    return b"-%04x" % ttl_min


# Job ids are spread over 4096 dicts by two chars of their random part, so JSCAN
# can walk them with a stable integer cursor (SPEC: every job present for the
# whole iteration is returned at least once) and the AOF rewrite a shard at a time.
SHARDS: Final = 4096
# byte -> its base64 digit (Final bytes: a C static and a C index in the compiled build)
B64_INDEX: Final = bytes(_B64.index(c) if c in _B64 else 0 for c in range(256))


def job_shard(jid: bytes) -> int:
    return (B64_INDEX[jid[11]] << 6) | B64_INDEX[jid[12]]


def ttl_from_id(jid: bytes) -> int:
    """TTL in seconds encoded in an id (minutes, rounded down), used for dummy acks."""
    return int(jid[36:40], 16) * 60


def id_is_at_least_once(jid: bytes) -> bool:
    return bool(int(jid[39:40], 16) & 1)


def node_prefix_of(jid: bytes) -> bytes:
    """The first 8 hex chars of the creating node's id."""
    return jid[2:10]


# -- holders -------------------------------------------------------------------
# A job's holder lists (nodes_delivered, nodes_confirmed) are sorted tuples of
# node ids, one object shared by every job with the same holders: a tuple
# cannot change, so sharing it is safe, and a change makes (or finds) another.
# A set per job cost about 230 bytes on every node holding a copy, a call to
# make it per ADDJOB and per REPLJOB, and one more object for the cyclic GC to
# walk (a set is always tracked; a tuple of str is dropped after one pass).
Holders = tuple[str, ...]

HOLDERS_MAX: Final = 4096     # the holder lists one HolderLists keeps


class HolderLists:
    """The shared holder tuples of one node's jobs (the Registry's ``holders``),
    by the ids as given (sorted or not); bounded, as what is in it comes from
    peers too."""

    __slots__ = ("_shared",)

    def __init__(self) -> None:
        self._shared: dict[tuple, tuple] = {}

    def of(self, ids: Iterable[str]) -> Holders:
        """The shared sorted tuple of these node ids, duplicates dropped."""
        key = tuple(ids)
        found = self._shared.get(key)
        if found is not None:
            return found
        holders = tuple(sorted(set(key)))
        if len(self._shared) >= HOLDERS_MAX:
            self._shared.clear()
        self._shared[key] = holders
        return holders

    def with_holder(self, holders: Holders | None, node_id: str) -> Holders:
        """``holders`` with ``node_id`` among them (the same tuple if it is)."""
        if holders is None:
            return self.of((node_id,))
        for h in holders:       # a few; the bus hands one str per node id (identity)
            if h is node_id or h == node_id:
                return holders
        return self.of(holders + (node_id,))


# A node may hold millions of jobs, so their layout is about bytes. Compiled
# (mypyc), a Job is a native object of 112 bytes: acyclic, so without the GC's
# header and never walked by the collector (its one cycle, job <-> timer chunk,
# is broken when the slot is cleared: broker/timers.py); state, timer slot,
# flags and REPLICATE as narrow C ints in one word; and the fields most jobs
# never set in one JobExtra, made on the first write of a value other than its
# default.
@mypyc_attr(acyclic=True)
class JobExtra:
    """A job's rarely set fields (read and written through Job's properties)."""

    __slots__ = ("delay", "nacks", "additional_deliveries", "nodes_confirmed", "gc_time",
                 "gc_retry", "idem_key")

    def __init__(self) -> None:
        self.delay = 0              # seconds
        self.nacks = 0
        self.additional_deliveries = 0
        self.nodes_confirmed: Holders | None = None
        self.gc_time = 0            # acked: next ack GC attempt, ms
        self.gc_retry = 0           # ack GC attempts so far (backoff exponent)
        self.idem_key: bytes | None = None


# A job's place in the timer wheel (broker/timers.py): ``job.timer`` is the
# chunk holding it, ``job.timer_slot`` its index there. Acyclic (compiled):
# its one cycle, through its jobs, is broken as each leaves.
@mypyc_attr(acyclic=True)
class Chunk:
    """Up to CHUNK jobs of one timer bucket (None where one left), how many
    are live, and the bucket's key."""

    __slots__ = ("jobs", "live", "key")

    def __init__(self, jobs: list, key: int) -> None:
        self.jobs = jobs
        self.live = len(jobs)
        self.key = key


@mypyc_attr(acyclic=True)
class Job:
    """One job. __slots__ because a node may hold millions of them."""

    __slots__ = (
        "id", "queue", "body", "state", "timer_slot", "flags", "repl", "etime", "ctime",
        "retry", "requeue_time", "nodes_delivered", "timer", "_extra",
    )

    def __init__(self, jid: bytes, queue: bytes, body: bytes, state: int, repl: int,
                 etime: int, ctime: int, delay: int, retry: int) -> None:
        self.id = jid
        self.queue = queue
        self.body = body
        # Four small ints in one 8-byte word of the compiled Job (in this order):
        # a state, a slot of a 256-entry chunk, the flags' byte (i16: ~FLAG
        # masks are negative), and REPLICATE (at most 65535).
        self.state: u8 = state
        # The timer-wheel chunk holding it and its index there (broker/timers.py).
        self.timer_slot: u8 = 0
        self.flags: i16 = 0
        self.repl: i32 = repl
        self.etime = etime          # absolute expire time, ms
        self.ctime = ctime          # ordering key: ms * 1e6 + per-ms counter
        self.retry = retry          # seconds; 0 = at most once
        # Only broker/lifecycle.py assigns state and these times.
        self.requeue_time = 0       # next (re)queue time, ms (DELAY or RETRY); 0 = none
        # Node ids that may hold a copy (see Holders). None on a lone node's
        # job means "just me".
        self.nodes_delivered: Holders | None = None
        self.timer: Chunk | None = None
        self._extra: JobExtra | None = None
        if delay:
            self.delay = delay

    def _more(self) -> JobExtra:
        x = self._extra
        if x is None:
            x = self._extra = JobExtra()
        return x

    # The rarely set fields: their default without a JobExtra, and no JobExtra
    # made to store a default.
    @property
    def delay(self) -> int:
        """DELAY, seconds."""
        x = self._extra
        return 0 if x is None else x.delay

    @delay.setter
    def delay(self, v: int) -> None:
        if v or self._extra is not None:
            self._more().delay = v

    @property
    def nacks(self) -> int:
        x = self._extra
        return 0 if x is None else x.nacks

    @nacks.setter
    def nacks(self, v: int) -> None:
        if v or self._extra is not None:
            self._more().nacks = v

    @property
    def additional_deliveries(self) -> int:
        x = self._extra
        return 0 if x is None else x.additional_deliveries

    @additional_deliveries.setter
    def additional_deliveries(self, v: int) -> None:
        if v or self._extra is not None:
            self._more().additional_deliveries = v

    @property
    def nodes_confirmed(self) -> Holders | None:
        """Node ids (str) that confirmed they hold a copy."""
        x = self._extra
        return None if x is None else x.nodes_confirmed

    @nodes_confirmed.setter
    def nodes_confirmed(self, v: Holders | None) -> None:
        if v is not None or self._extra is not None:
            self._more().nodes_confirmed = v

    @property
    def gc_time(self) -> int:
        """Acked: the next ack GC attempt, ms."""
        x = self._extra
        return 0 if x is None else x.gc_time

    @gc_time.setter
    def gc_time(self, v: int) -> None:
        if v or self._extra is not None:
            self._more().gc_time = v

    @property
    def gc_retry(self) -> int:
        """Ack GC attempts so far (backoff exponent)."""
        x = self._extra
        return 0 if x is None else x.gc_retry

    @gc_retry.setter
    def gc_retry(self, v: int) -> None:
        if v or self._extra is not None:
            self._more().gc_retry = v

    @property
    def idem_key(self) -> bytes | None:
        """(ext) ADDJOB ... IDEMPOTENCY key: the producer's key (broker/idempotency.py)."""
        x = self._extra
        return None if x is None else x.idem_key

    @idem_key.setter
    def idem_key(self, v: bytes | None) -> None:
        if v is not None or self._extra is not None:
            self._more().idem_key = v

    @property
    def state_name(self) -> bytes:
        return STATE_NAMES[self.state]

    def memory_size(self) -> int:
        """Bytes accounted against maxmemory (body + fixed overhead estimate)."""
        return len(self.body) + JOB_OVERHEAD

    def __repr__(self) -> str:  # for debugging and test failure messages
        return f"<Job {self.id.decode()} q={self.queue!r} {STATE_NAMES[self.state].decode()}>"


# Rough fixed cost of a Job in this process (object, id, dict entry, queue entry),
# used for maxmemory accounting, which must be deterministic (SPEC section 6).
JOB_OVERHEAD: Final = 320


def job_to_fields(job: Job) -> list:
    """The job's record (disquette/job_record.py): every field needed to
    rebuild it, msgpack-friendly (bus REPLJOB/YOURJOBS; the AOF's job records
    from format version 3 on). A job added with an IDEMPOTENCY key has one
    more field, the key. The holders go as they are kept, sorted (msgpack
    sends a tuple as an array)."""
    keyed = job.idem_key is not None
    fields: list = [None] * (field.KEYED_FIELDS if keyed else field.FIELDS)
    fields[field.ID] = job.id
    fields[field.QUEUE] = job.queue
    fields[field.BODY] = job.body
    fields[field.STATE] = job.state
    fields[field.FLAGS] = job.flags
    fields[field.REPLICATE] = job.repl
    fields[field.ETIME] = job.etime
    fields[field.CTIME] = job.ctime
    fields[field.DELAY] = job.delay
    fields[field.RETRY] = job.retry
    fields[field.NACKS] = job.nacks
    fields[field.ADDITIONAL_DELIVERIES] = job.additional_deliveries
    fields[field.NODES_DELIVERED] = job.nodes_delivered or None
    fields[field.REQUEUE_TIME] = job.requeue_time
    if keyed:
        fields[field.IDEMPOTENCY_KEY] = job.idem_key
    return fields


def job_from_fields(f: list, holders: HolderLists) -> Job:
    """A copy from another node (a record as protocol/bus.py checked it: the
    id, queue, body and key are bytes already, so they are taken as they are,
    not copied through a ``bytes()`` call each), its holders one of the node's
    shared ``holders``; its state and times are set by broker/lifecycle.py
    when the copy is adopted."""
    jid: bytes = f[field.ID]
    queue: bytes = f[field.QUEUE]
    body: bytes = f[field.BODY]
    job = Job(jid, queue, body, f[field.STATE], f[field.REPLICATE], f[field.ETIME],
              f[field.CTIME], f[field.DELAY], f[field.RETRY])
    job.flags = f[field.FLAGS]
    job.nacks = f[field.NACKS]
    job.additional_deliveries = f[field.ADDITIONAL_DELIVERIES]
    delivered = f[field.NODES_DELIVERED]
    job.nodes_delivered = holders.of(delivered) if delivered else None
    if len(f) > field.IDEMPOTENCY_KEY:
        key: bytes = f[field.IDEMPOTENCY_KEY]
        job.idem_key = key
    return job
