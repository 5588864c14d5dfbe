"""A job's record: the fields that rebuild a job, each at one position, and the
bounds of its narrow integers. Every copy of a job lists them in this order:
REPLJOB and YOURJOBS on the bus (broker/job.py job_to_fields, checked by
protocol/bus.py), the rows and columns of the AOF's job records from format
version 3 on (broker/aof_format.py writes them, disquette/aof_codec.py reads
them) and the job history's reader (disquette/spark/aof_rows.py).

The order is the bus's: peers of the previous release read it, so a field
never moves. The IDEMPOTENCY key (ext) is listed only by a job that has one;
a job without one has the layout peers without the extension know. On the bus
the sender's clock (ext, an int: cluster/replication.py wire_fields) may
follow the record.
"""

from __future__ import annotations

from typing import Final

# (Final: a C constant wherever the compiled build reads a field.)
ID: Final = 0                       # 40 bytes (broker/job.py make_job_id)
QUEUE: Final = 1                    # bytes
BODY: Final = 2                     # bytes
STATE: Final = 3                    # broker/job.py's state codes
FLAGS: Final = 4                    # broker/job.py's FLAG_* bits
REPLICATE: Final = 5
ETIME: Final = 6                    # expire time, ms (the writer's clock)
CTIME: Final = 7                    # ms * 1_000_000 + counter (ordering key)
DELAY: Final = 8                    # seconds
RETRY: Final = 9                    # seconds
NACKS: Final = 10
ADDITIONAL_DELIVERIES: Final = 11
NODES_DELIVERED: Final = 12         # node ids (str), sorted, or None
REQUEUE_TIME: Final = 13            # ms, 0 = none
IDEMPOTENCY_KEY: Final = 14         # (ext) bytes, only in a keyed job's record

FIELDS: Final = 14                  # the fields of every record (all but the key)
KEYED_FIELDS: Final = 15            # a keyed job's record

# The fields' names, by position (the history reader's column names).
NAMES: Final = (
    "id", "queue", "body", "state", "flags", "replicate", "etime", "ctime", "delay",
    "retry", "nacks", "additional_deliveries", "nodes_delivered", "requeue_time",
    "idempotency_key",
)

# The narrow integers of the compiled Job (broker/job.py): a peer's or a
# file's value outside these is refused where it is read.
STATE_MAX: Final = 255              # u8
FLAGS_MAX: Final = 255              # the flags' byte
REPLICATE_MAX: Final = 65535        # ADDJOB ... REPLICATE's limit
KEY_MAX_BYTES: Final = 256          # (ext) a key is 1 to 256 bytes
