"""Client commands: one module per family, each a set of ``@command`` handlers.

A handler is ``fn(node, client, argv) -> reply``: it parses its arguments
(broker/commands/args.py), asks the Node (broker/lifecycle.py for job state
changes, node.cluster for the cluster) to act, and returns the reply value (see
protocol/resp.py for the types). Parse failures raise CommandError, which the
Node turns into the reply.

``COMMANDS`` (broker/commands/table.py) is the table the composition root
(server/) gives the Node; importing this package registers every family.
"""

from __future__ import annotations

from broker.commands.table import COMMANDS, renamed  # noqa: F401

# Every family registers its commands in COMMANDS when imported.
from broker.commands import (  # noqa: F401
    cluster, connection, getjob, jobs, queues, scan, server, states,
)
