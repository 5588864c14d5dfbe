"""QSCAN and JSCAN: cursor iteration over queues and jobs.

Both walk a fixed space of 4096 shards: a queue's shard is a CRC of its name, a
job's shard two characters of its random id. The cursor is the next shard to
visit, so an item present for the whole iteration is returned at least once
whatever is added or removed meanwhile; 0 starts and ends an iteration.
"""

from __future__ import annotations

import zlib

from broker.commands import SYNTAX_ERROR, CommandError, command, parse_int
from broker.commands.jobs import show_fields
from broker.commands.queues import import_rate
from broker.job import FLAG_DUMMY_ACK, STATE_BY_NAME
from broker.node import SHARDS

DEFAULT_COUNT = 10


def _parse_cursor(arg: bytes) -> int:
    """A cursor argument: a decimal shard number, 0 <= cursor < SHARDS."""
    if not arg.isdigit():
        raise CommandError("ERR invalid cursor")
    cursor = int(arg)
    if cursor >= SHARDS:
        raise CommandError("ERR invalid cursor")
    return cursor


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


@command("qscan", -1)
def qscan(node, client, argv):
    """QSCAN [cursor] [COUNT n] [BUSYLOOP] [MINLEN n] [MAXLEN n] [IMPORTRATE r]"""
    cursor, cursor_parsed, i = 0, False, 1
    count, busyloop, minlen, maxlen, minrate = DEFAULT_COUNT, False, 0, 0, 0
    while i < len(argv):
        opt = argv[i].lower()
        last = i == len(argv) - 1
        if opt == b"count" and not last:
            count = parse_int(argv[i + 1])
            if count <= 0:
                raise CommandError("ERR COUNT must be greater than zero")
            i += 1
        elif opt == b"busyloop":
            busyloop = True
        elif opt == b"minlen" and not last:
            minlen = parse_int(argv[i + 1])
            i += 1
        elif opt == b"maxlen" and not last:
            maxlen = parse_int(argv[i + 1])
            i += 1
        elif opt == b"importrate" and not last:
            minrate = parse_int(argv[i + 1])
            i += 1
        elif not cursor_parsed:
            # As in Disque, the cursor may come anywhere among the options;
            # any other word is taken as the cursor, once.
            cursor = _parse_cursor(argv[i])
            cursor_parsed = True
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    now = node.clock()
    by_shard: dict[int, list] = {}
    for name, q in node.queues.items():
        n = len(q.jobs)
        if n < minlen or (maxlen and n > maxlen):
            continue
        if minrate and import_rate(q, now) < minrate:
            continue
        by_shard.setdefault(zlib.crc32(name) % SHARDS, []).append(name)
    nxt, names = _walk(lambda s: by_shard.get(s, ()), cursor, count, busyloop)
    return [b"%d" % nxt, names]


@command("jscan", -1)
def jscan(node, client, argv):
    """JSCAN [cursor] [COUNT n] [BUSYLOOP] [QUEUE q] [STATE s ...] [REPLY id|all]"""
    cursor, cursor_parsed, i = 0, False, 1
    count, busyloop, queue, states, reply_all = DEFAULT_COUNT, False, None, set(), False
    while i < len(argv):
        opt = argv[i].lower()
        last = i == len(argv) - 1
        if opt == b"count" and not last:
            count = parse_int(argv[i + 1])
            if count <= 0:
                raise CommandError("ERR COUNT must be greater than zero")
            i += 1
        elif opt == b"busyloop":
            busyloop = True
        elif opt == b"queue" and not last:
            queue = argv[i + 1]
            i += 1
        elif opt == b"state" and not last:
            state = STATE_BY_NAME.get(argv[i + 1].lower())
            if state is None:
                raise CommandError("ERR Invalid job state name")
            states.add(state)
            i += 1
        elif opt == b"reply" and not last:
            kind = argv[i + 1].lower()
            if kind not in (b"id", b"all"):
                raise CommandError("ERR REPLY option must be 'all' or 'id'")
            reply_all = kind == b"all"
            i += 1
        elif not cursor_parsed:
            # As in Disque, the cursor may come anywhere among the options;
            # any other word is taken as the cursor, once.
            cursor = _parse_cursor(argv[i])
            cursor_parsed = True
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    now = node.clock()

    def items(shard: int):
        for job in node.job_shards[shard].values():
            if job.flags & FLAG_DUMMY_ACK:
                continue
            if queue is not None and job.queue != queue:
                continue
            if states and job.state not in states:
                continue
            yield show_fields(node, job, now) if reply_all else job.id

    nxt, found = _walk(lambda s: list(items(s)), cursor, count, busyloop)
    return [b"%d" % nxt, found]
