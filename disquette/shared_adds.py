"""Jobs that every worker adds and the cluster makes once: the ticks of
periodic jobs (periodic.py) and the slots of concurrency limits (limits.py).

Each worker adds the job with ADDJOB ... IDEMPOTENCY (ext) and a key naming
it (a periodic job's name and tick; a limit's queue, size and slot).  A node
answers a key it knows with the first add's id and creates nothing; a node
knows a key when the job was added there or it holds a copy.  So every
worker adds on the same node, the *anchor* (the live node with the lowest
id, from HELLO: every client sees the same), where adds made at the same
moment wait for one another, and with REPLICATE as many as the live nodes,
so that once the job exists every live node knows its key.  If the anchor
is down, the add goes to another node, which knows the key from its copy.

The window left (docs/sdk.md): workers that disagree on the live nodes
(during a partition) add on different anchors at the same moment.
"""

from __future__ import annotations

from typing import Any

from .commands import addjob_request

ADD_TIMEOUT_MS = 5000
LIVE_PRIORITY = 5   # HELLO priorities 1 (ok) and 5 (no link yet): not failing


async def add_once(aclient: Any, queue: str, body: Any, key: str, *, ttl: int, retry: int,
                   delay: int | None = None) -> str:
    """Add the job named ``key`` on the anchor, replicated to every live
    node; the id of the job (made now, or earlier by another worker)."""
    hello = await aclient.hello()
    live = sorted((n for n in hello.nodes if n.priority <= LIVE_PRIORITY), key=lambda n: n.id)
    anchor = live[0].addr if live else None
    options = {"replicate": max(1, len(live)), "ttl": ttl, "retry": retry, "delay": delay,
               "idempotency_key": key}
    req = addjob_request(aclient.serializer, queue, body, ADD_TIMEOUT_MS, options)
    return await aclient._run(req._replace(node=anchor))
