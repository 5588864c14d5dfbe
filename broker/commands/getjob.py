# compiled: mypyc (setup.py builds each module whose first line this is)
"""GETJOB: take jobs from queues, blocking when they are all empty."""

from __future__ import annotations

from broker import lifecycle
from broker.commands.args import SYNTAX_ERROR, parse_int, parse_timeout_ms
from broker.client import Client
from broker.commands.table import command
from broker.dispatch import CommandError
from broker.node import BLOCKED, Node, job_reply
from broker.queue import PAUSED_OUT
from protocol.resp import NULL_ARRAY, Error

LEAVING = Error("LEAVING This node is leaving the cluster, please connect to a different one")
# Option names as clients send them (lower or upper case) -> lower case, so
# the usual call needs no lower() per option.
_OPTIONS = {o: o for o in b"from nohang withcounters timeout count".split()}
_OPTIONS.update({o.upper(): o for o in _OPTIONS})


# Disque's arity: "GETJOB FROM" is a syntax error.
@command("getjob", -2,
         doc="GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM queue [queue ...]")
def getjob(node: Node, client: Client, argv: list):
    timeout = 0
    count = 1
    nohang = False
    withcounters = False
    names = None
    i, argc = 1, len(argv)
    while i < argc:
        opt: bytes = _OPTIONS.get(argv[i]) or argv[i].lower()
        last = i == argc - 1
        if opt == b"from":
            names = argv[i + 1:]
            break
        if opt == b"nohang":
            nohang = True
        elif opt == b"withcounters":
            withcounters = True
        elif opt == b"timeout" and not last:
            timeout = parse_timeout_ms(argv[i + 1])
            i += 1
        elif opt == b"count" and not last:
            count = parse_int(argv[i + 1], "ERR COUNT must be a number greater than zero")
            if count <= 0:
                raise CommandError("ERR COUNT must be a number greater than zero")
            i += 1
        else:
            raise CommandError(SYNTAX_ERROR)
        i += 1
    if not names:
        raise CommandError(SYNTAX_ERROR)

    # As Disque, a queue we looked in for a job and that does not exist is
    # created (it then shows in QSTAT/QSCAN until the idle queue GC).
    queues = node.queues
    if count == 1:
        # The usual call: one job, from the first queue that has one.
        for name in names:
            q = queues.get(name)
            if q is None:
                node.get_queue(name, create=True)
            elif q.jobs.size and not q.flags & PAUSED_OUT:
                job = lifecycle.deliver(node, q, node.clock())
                assert job is not None      # the queue has jobs
                return [job_reply(job, withcounters)]
        found = None
    else:
        found = [q for q in (queues.get(n) or node.get_queue(n, create=True) for n in names)
                 if q.jobs.size and not q.flags & PAUSED_OUT]
    if found:
        # Round robin over the queues, one job each per pass, until COUNT.
        now = node.clock()
        jobs: list = []
        while found and len(jobs) < count:
            for q in found:
                job = lifecycle.deliver(node, q, now)
                if job is not None:
                    jobs.append(job_reply(job, withcounters))
                    if len(jobs) == count:
                        break
            found = [q for q in found if q.jobs]
        return jobs
    if nohang:
        return NULL_ARRAY
    if node.cluster.leaving():
        return LEAVING
    node.block_client(client, [node.get_queue(n, create=True) for n in dict.fromkeys(names)],
                      timeout, count, withcounters)
    return BLOCKED
