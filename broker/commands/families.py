"""Imports every command family so that their @command decorators register them.
broker/node.py imports this last, since the families import the Node module."""

from broker.commands import (  # noqa: F401
    cluster, connection, getjob, jobs, queues, scan, server, states,
)
