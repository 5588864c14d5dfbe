"""QSCAN and JSCAN: cursor iteration over queues and jobs.

Both walk a fixed space of 4096 shards: a queue's shard is a CRC of its name, a
job's shard two characters of its random id. The cursor is the next shard to
visit, so an item present for the whole iteration is returned at least once
whatever is added or removed meanwhile; 0 starts and ends an iteration.
"""

from __future__ import annotations

import zlib

from broker.commands.args import SYNTAX_ERROR, c_integer, parse_int
from broker.commands.table import command
from broker.dispatch import CommandError
from broker.commands.jobs import show_fields
from broker.job import FLAG_DUMMY_ACK, SHARDS, STATE_BY_NAME
from protocol.resp import Status

DEFAULT_COUNT = 100     # Disque's QSCAN_DEFAULT_COUNT / JSCAN_DEFAULT_COUNT


def _parse_cursor(arg: bytes) -> int:
    """A cursor as Disque's parseScanCursorOrReply reads it (strtoul: "-1" is the
    largest unsigned long), masked to a shard as dictScan masks it to a bucket."""
    n = c_integer(arg)
    if n is None or abs(n) >= 1 << 64:
        raise CommandError("ERR invalid cursor or option name")
    return n % SHARDS


def _walk(shards_items, cursor: int, count: int, busyloop: bool):
    """Visit shards from cursor until count items: (next cursor, items)."""
    out = []
    shard = cursor
    while shard < SHARDS:
        out.extend(shards_items(shard))
        shard += 1
        if not busyloop and len(out) >= count:
            break
    return (0 if shard >= SHARDS else shard), out


def _parse_scan_args(argv: list, options: dict) -> tuple[int, int, bool, dict]:
    """[cursor] [COUNT n] [BUSYLOOP] plus the command's own valued `options`
    ({name: parse(value)}): (cursor, count, busyloop, {name: [values...]}).
    As in Disque, the cursor may come anywhere among the options; any other
    word is taken as the cursor, once."""
    cursor, cursor_parsed, count, busyloop = 0, False, DEFAULT_COUNT, False
    values: dict[bytes, list] = {}
    i = 1
    while i < len(argv):
        opt = argv[i].lower()
        has_value = i < len(argv) - 1
        if opt == b"busyloop":
            busyloop = True
        elif opt == b"count" and has_value:
            count = parse_int(argv[i + 1])
            if count < 0:
                count = 1 << 64     # as Disque, which compares it as an unsigned long
            i += 1
        elif opt in options and has_value:
            values.setdefault(opt, []).append(options[opt](argv[i + 1]))
            i += 1
        elif not cursor_parsed:
            cursor = _parse_cursor(argv[i])
            cursor_parsed = True
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    return cursor, count, busyloop, values


def _state(arg: bytes) -> int:
    state = STATE_BY_NAME.get(arg.lower())
    if state is None:
        raise CommandError("ERR Invalid job state name")
    return state


def _reply_kind(arg: bytes) -> bool:
    kind = arg.lower()
    if kind not in (b"id", b"all"):
        raise CommandError("ERR Invalid REPLY type, try ID or ALL")
    return kind == b"all"


@command("qscan", -1,
         doc="QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]")
def qscan(node, client, argv):
    cursor, count, busyloop, opts = _parse_scan_args(
        argv, {b"minlen": parse_int, b"maxlen": parse_int, b"importrate": parse_int})
    # As Disque, -1 (the default) means no filter; MAXLEN 0 keeps empty queues only.
    minlen = opts.get(b"minlen", [-1])[-1]
    maxlen = opts.get(b"maxlen", [-1])[-1]
    minrate = opts.get(b"importrate", [-1])[-1]
    now = node.clock()
    by_shard: dict[int, list] = {}
    for name, q in node.queues.items():
        n = len(q.jobs)
        if (minlen != -1 and n < minlen) or (maxlen != -1 and n > maxlen):
            continue
        if minrate != -1 and q.import_rate(now) < minrate:
            continue
        by_shard.setdefault(zlib.crc32(name) % SHARDS, []).append(name)
    nxt, names = _walk(lambda s: by_shard.get(s, ()), cursor, count, busyloop)
    return [b"%d" % nxt, names]


@command("jscan", -1,
         doc="JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY id|all]")
def jscan(node, client, argv):
    cursor, count, busyloop, opts = _parse_scan_args(
        argv, {b"queue": bytes, b"state": _state, b"reply": _reply_kind})
    queue = opts.get(b"queue", [None])[-1]
    states = set(opts.get(b"state", ()))
    reply_all = opts.get(b"reply", [False])[-1]
    now = node.clock()

    def items(shard: int):
        for job in node.job_shards[shard].values():
            if job.flags & FLAG_DUMMY_ACK:
                continue
            if queue is not None and job.queue != queue:
                continue
            if states and job.state not in states:
                continue
            # Disque answers the ids as status replies.
            yield show_fields(node, job, now) if reply_all else Status(job.id.decode())

    nxt, found = _walk(lambda s: list(items(s)), cursor, count, busyloop)
    return [b"%d" % nxt, found]
