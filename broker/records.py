# compiled: mypyc (setup.py builds each module whose first line this is)
"""What the AOF must remember, as the core's outputs (SPEC section 7).

Every state change that must survive a restart appends an item to
``node.records`` (broker/lifecycle.py does it, whatever caused the change: a
client command, a bus message, a timer); the shell takes them after each input
and writes them (server/aof.py, or the simulator's disk) before the replies and
bus messages that depend on them leave. An item is either a Job (its creation or
arrival here: the whole job, encoded when written so that it carries the job's
state as of the end of that input) or ``(kind, job id)``.

The record types are the file format's (disquette/aof_codec.py). With
``aof-history yes`` (``node.persist_history``) the node also records
deliveries, NACKs, requeues and expirations (as E instead of D).
"""

from __future__ import annotations

from disquette.aof_codec import (  # noqa: F401  (the kinds of the items above)
    REC_ACK, REC_DEL, REC_DELIVERED, REC_EXPIRED, REC_FLUSHALL, REC_GOT, REC_JOB_ROWS, REC_JOBS,
    REC_NACK, REC_RELEASED, REC_REQUEUE, RECORD_NAMES,
)
