# compiled: mypyc (setup.py builds each module whose first line this is)
"""ADDJOB, SHOW, DELJOB: creating, inspecting and evicting jobs."""

from __future__ import annotations

from typing import Final

from broker import lifecycle
from broker.commands.args import (
    MAX_SECONDS, SYNTAX_ERROR, parse_int, parse_job_ids, parse_timeout_ms,
)
from broker.client import Client
from broker.cluster_hooks import NOREPL_NODES
from broker.commands.table import command
from broker.dispatch import F_DENYOOM, F_FAST, F_WRITE, CommandError
from broker.idempotency import ERR_KEY_MISSING, key_error
from broker.job import (
    ACKED, BADID, DEFAULT_RETRY_MAX, DEFAULT_TTL, FLAG_DUMMY_ACK, WAIT_REPL, valid_job_id,
)
from broker.queue import PAUSED_IN
from broker.node import Node
from disquette import job_record as field
from protocol.resp import Error, Status

ERR_REPLICATE: Final = "ERR REPLICATE must be between 1 and %d" % field.REPLICATE_MAX
ERR_TTL: Final = "ERR TTL must be a number > 0"
ERR_RETRY: Final = "ERR RETRY time must be a non negative number"
ERR_DELAY: Final = "ERR DELAY time must be a non negative number"
ERR_MAXLEN: Final = "ERR MAXLEN must be a positive number"


@command("addjob", -4, F_DENYOOM | F_WRITE,
         doc="ADDJOB queue job ms-timeout [REPLICATE n] [DELAY s] [RETRY s] [TTL s] "
             "[MAXLEN n] [ASYNC] [HOLD] [IDEMPOTENCY key]")
def addjob(node: Node, client: Client, argv: list):
    replicate = 0
    delay = 0
    retry = -1
    ttl = DEFAULT_TTL
    maxlen = 0
    is_async = False
    hold = False
    idem_key: bytes | None = None
    i, argc = 4, len(argv)
    while i < argc:
        opt = argv[i].lower()
        last = i == argc - 1
        # Disque's texts, for a value out of range or not a number alike.
        if opt == b"replicate" and not last:
            replicate = parse_int(argv[i + 1], ERR_REPLICATE)
            if replicate <= 0 or replicate > field.REPLICATE_MAX:
                raise CommandError(ERR_REPLICATE)
            i += 1
        elif opt == b"ttl" and not last:
            ttl = parse_int(argv[i + 1], ERR_TTL)
            if ttl <= 0:
                raise CommandError(ERR_TTL)
            i += 1
        elif opt == b"retry" and not last:
            retry = parse_int(argv[i + 1], ERR_RETRY)
            if retry < 0:
                raise CommandError(ERR_RETRY)
            i += 1
        elif opt == b"delay" and not last:
            delay = parse_int(argv[i + 1], ERR_DELAY)
            if delay < 0:
                raise CommandError(ERR_DELAY)
            i += 1
        elif opt == b"maxlen" and not last:
            maxlen = parse_int(argv[i + 1], ERR_MAXLEN)
            if maxlen <= 0:
                raise CommandError(ERR_MAXLEN)
            i += 1
        elif opt == b"async":
            is_async = True
        elif opt == b"hold":
            hold = True         # (ext) held until an ENQUEUE releases it
        elif opt == b"idempotency":     # (ext) see broker/idempotency.py
            if last:
                raise CommandError(ERR_KEY_MISSING)
            idem_key = bytes(argv[i + 1])
            err = key_error(idem_key)
            if err is not None:
                raise CommandError(err)
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    ms: bytes = argv[3]
    timeout = 0 if ms == b"0" else parse_timeout_ms(ms)

    if retry == -1:
        retry = min(ttl // 10, DEFAULT_RETRY_MAX) or 1
    cluster = node.cluster
    reachable = cluster.reachable_count()
    if replicate == 0:
        replicate = min(3, reachable)
    if replicate > 1 and retry == 0:
        # (sic: two spaces, as Disque writes it)
        raise CommandError("ERR With RETRY set to 0 please explicitly set  "
                           "REPLICATE to 1 (at-most-once delivery)")
    if delay >= ttl:
        raise CommandError("ERR The specified DELAY is greater than TTL. Job refused "
                           "since would never be delivered")
    ttl = min(ttl, MAX_SECONDS)
    delay, retry = min(delay, ttl - 1), min(retry, MAX_SECONDS)
    if idem_key is not None:
        known = known_add(node, client, argv[1], idem_key)
        if known is not None:
            return known

    # Leaving, or over 75% of maxmemory, we keep no local copy (SPEC sections 6, 8);
    # for memory only when another node can hold it: a lone node keeps it until OOM.
    leaving = cluster.leaving()
    external = leaving or (reachable > 1 and node.memory_level() >= 1)
    if replicate > (reachable - 1 if external else reachable):
        if external and replicate == reachable:
            # One more node would do, but we may not keep a copy: say why.
            return Error(NOREPL_NODES + ", since I'm unable to hold a copy of the message "
                         "for the following reason: " + ("I'm leaving the cluster"
                                                        if leaving else "I'm out of memory"))
        return NOREPL_NODES

    qname = argv[1]
    q = node.queues.get(qname)
    if q is not None:
        if maxlen and len(q.jobs) >= maxlen:
            return Error("MAXLEN Queue is already longer than the specified MAXLEN count")
        if q.flags & PAUSED_IN:
            return Error("PAUSED Queue paused in input, try later")
        qname = q.name      # one bytes object for the queue's name, not one per job

    now = node.clock()
    job = lifecycle.new_job(node, qname, argv[2], replicate, ttl, delay, retry, now)
    if hold:
        lifecycle.hold(job)
    if idem_key is not None:
        job.idem_key = idem_key
        lifecycle.remember_key(node, job, now)
    if replicate > 1 or external:
        # The cluster layer replicates, answers (now if ASYNC) and queues.
        return cluster.replicate_new_job(client, job, timeout, is_async, external)
    # One copy, here: it is replicated as soon as it exists.
    lifecycle.add(node, job, now)
    return Status(job.id.decode())


def known_add(node: Node, client: Client, queue: bytes, key: bytes):
    """(ext) A retried ADDJOB: the reply for the job this node knows by
    (queue, key) - its id, or, while its own ADDJOB here still waits for its
    copies, that add's outcome when it comes (BLOCKED) - or None: unknown."""
    jid = node.idempotency.lookup(queue, key, node.clock())
    if jid is None:
        return None
    job = node.get_job(jid)
    if job is not None and job.state != WAIT_REPL and job.state != ACKED:
        lifecycle.key_answered(node, job)
    return node.cluster.known_add(client, jid)


@command("show", 2, F_FAST,
         doc="SHOW job-id")
def show(node: Node, client: Client, argv: list):
    jid = argv[1]
    if not valid_job_id(jid):
        return Error(BADID)
    job = node.get_job(jid)
    if job is None:
        return None
    return show_fields(node, job, node.clock())


def show_fields(node: Node, job, now: int) -> list:
    """SHOW's flat field/value array (also JSCAN REPLY all)."""
    me = node.myself_id.encode()
    if job.nodes_delivered:
        delivered = sorted(n.encode() for n in job.nodes_delivered)
    else:   # a lone copy here, or a dummy ack (Disque lists no node for it)
        delivered = [] if job.flags & FLAG_DUMMY_ACK else [me]
    # As Disque: the nodes that confirmed the copy while it waits for replication,
    # or the ack (this node first) while the acked job is collected; else none.
    if job.state == WAIT_REPL:
        confirmed = sorted(n.encode() for n in job.nodes_confirmed or ())
    elif job.state == ACKED and not job.flags & FLAG_DUMMY_ACK:
        confirmed = sorted({me, *(n.encode() for n in job.nodes_confirmed or ())})
    else:
        confirmed = []
    awake = lifecycle.wake_time(job)
    return [
        b"id", job.id,
        b"queue", job.queue,
        b"state", job.state_name,
        b"repl", job.repl,
        b"ttl", -((now - job.etime) // 1000),     # seconds left, rounded up like Disque's
        b"ctime", job.ctime,
        b"delay", job.delay,
        b"retry", job.retry,
        b"nacks", job.nacks,
        b"additional-deliveries", job.additional_deliveries,
        b"nodes-delivered", delivered,
        b"nodes-confirmed", confirmed,
        b"next-requeue-within", max(job.requeue_time - now, 0)
        if job.requeue_time and job.state != ACKED else None,
        b"next-awake-within", max(awake - now, 0) if awake else None,
        b"body", job.body,
    ]


@command("deljob", -1, F_WRITE | F_FAST,
         doc="DELJOB [job-id ...]: evict jobs from this node only.")
def deljob(node: Node, client: Client, argv: list):
    evicted = 0
    for jid in parse_job_ids(node, argv):
        job = node.get_job(jid)
        if job is not None:
            lifecycle.delete(node, job)
            evicted += 1
    return evicted


@command("loadjob", 2, F_WRITE,
         doc="LOADJOB serialized-job: only in the AOF (as Disque, which logs jobs this way).")
def loadjob(node: Node, client: Client, argv: list):
    return Error("ERR LOADJOB is a special command only processed from AOF")
