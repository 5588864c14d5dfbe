"""QLEN, QPEEK, QSTAT, PAUSE: looking at and controlling queues."""

from __future__ import annotations

from broker.commands.args import SYNTAX_ERROR, parse_int
from broker.commands.table import command
from broker.dispatch import F_FAST, CommandError
from broker.node import job_reply
from broker.queue import PAUSED_IN, PAUSED_OUT, Queue
from protocol.resp import NULL_ARRAY, Status


@command("qlen", 2, F_FAST, doc="QLEN queue")
def qlen(node, client, argv):
    q = node.queues.get(argv[1])
    return len(q.jobs) if q is not None else 0


@command("qpeek", 3, doc="QPEEK queue count: oldest first, newest first when count < 0.")
def qpeek(node, client, argv):
    count = parse_int(argv[2])
    q = node.queues.get(argv[1])
    if q is None:
        return []
    return [job_reply(j) for j in q.peek(count)]


@command("qstat", 2, doc="QSTAT queue")
def qstat(node, client, argv):
    q = node.queues.get(argv[1])
    if q is None:
        return NULL_ARRAY
    now = node.clock()
    responders = sorted(n.encode() for n in q.needjobs_responders) if q.needjobs_responders else []
    return [
        b"name", q.name,
        b"len", len(q.jobs),
        b"age", (now - q.ctime) // 1000,
        b"idle", (now - q.atime) // 1000,
        b"blocked", len(q.blocked),
        b"import-from", responders,
        b"import-rate", q.import_rate(now),
        b"jobs-in", q.jobs_in,
        b"jobs-out", q.jobs_out,
        b"pause", q.pause_name,
    ]


@command("pause", -3, doc="PAUSE queue in|out|all|none|state|bcast ...")
def pause(node, client, argv):
    flags = 0
    update = bcast = False
    for opt in argv[2:]:
        opt = opt.lower()
        if opt == b"in":
            flags |= PAUSED_IN
            update = True
        elif opt == b"out":
            flags |= PAUSED_OUT
            update = True
        elif opt == b"all":
            flags |= PAUSED_IN | PAUSED_OUT
            update = True
        elif opt == b"none":
            flags = 0       # clears what earlier options of this call set
            update = True
        elif opt == b"state":
            pass
        elif opt == b"bcast":
            bcast = True
        else:
            raise CommandError(SYNTAX_ERROR)
    # As Disque: a queue is created only to remember a pause, so "state" or
    # "none" on an unknown queue leave no empty queue behind.
    q = node.get_queue(argv[1], create=update and flags != 0)
    if q is not None and update:
        node.set_queue_pause(q, flags)
        if bcast:
            node.cluster.broadcast_pause(q)
    elif q is None and update and bcast:
        # Unpause elsewhere without creating the queue here.
        node.cluster.broadcast_pause(Queue(argv[1], node.clock()))
    return Status(q.pause_name.decode() if q is not None else "none")
