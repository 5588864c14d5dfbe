"""What the AOF must remember, as the core's outputs (SPEC section 7).

Every state change that must survive a restart appends an item to
``node.records`` (broker/lifecycle.py does it, whatever caused the change: a
client command, a bus message, a timer); the shell takes them after each input
and writes them (server/aof.py, or the simulator's disk) before the replies and
bus messages that depend on them leave. An item is either a Job (its creation or
arrival here: the whole job, encoded when written so that it carries the job's
state as of the end of that input) or ``(kind, job id)``.
"""

from __future__ import annotations

from typing import Final

REC_JOBS: Final = 0x4A         # 'J'  job creations (a batch, in columns)
REC_JOB_ROWS: Final = 0x6A     # 'j'  job creations (a few, in rows)
REC_DEL: Final = 0x44          # 'D'  deletions (evictions of any kind)
REC_ACK: Final = 0x41          # 'A'  acknowledgements
REC_DELIVERED: Final = 0x52    # 'R'  RETRY 0 jobs delivered: never to be queued again
REC_FLUSHALL: Final = 0x46     # 'F'  DEBUG FLUSHALL
RECORD_NAMES = {REC_JOBS: "job batches", REC_JOB_ROWS: "job rows", REC_DEL: "deletions",
                REC_ACK: "acks", REC_DELIVERED: "deliveries", REC_FLUSHALL: "flushall"}
