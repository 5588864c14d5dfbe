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

# Names broker/commands/server.py still imports from the package (to move to
# broker.dispatch, .table and .args like the other families); bound before the
# families are imported below.
from broker.commands.args import SYNTAX_ERROR, parse_int  # noqa: F401
from broker.commands.table import COMMANDS, COMMANDS_ANYCASE, command, renamed  # noqa: F401
from broker.dispatch import (  # noqa: F401
    F_ADMIN, F_LOADING, F_NOAUTH, FLAG_NAMES, CommandError,
)

# Every family registers its commands in COMMANDS when imported.
from broker.commands import (  # noqa: F401
    cluster, connection, getjob, jobs, queues, scan, server, states,
)
