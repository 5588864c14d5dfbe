"""The compiled extensions, built by `pip install .` and `make venv`.

pyproject.toml holds the project's metadata; this file only lists what is
compiled: the request reader and the bus bodies' packer (Cython,
protocol/request_c.pyx and bus_c.pyx) and the hot core,
compiled by mypyc from its own .py modules (each .so shadows its .py; the .py
stays the definition of behaviour). Where the build runs with
DISQUETTE_NO_EXTENSIONS=1 nothing is compiled and the pure-Python modules run
(protocol/build.py; the same variable at run time selects them over a built .so).
"""

import os

from setuptools import setup

# The command path of ADDJOB, GETJOB, ACKJOB... and what it calls: the modules
# mypyc compiles (strictly typed enough for it; see the annotations they carry).
CORE = [
    "protocol/resp.py",
    "broker/job.py", "broker/queue.py", "broker/timers.py", "broker/client.py",
    "broker/dispatch.py", "broker/lifecycle.py", "broker/node.py", "broker/records.py",
    "broker/idempotency.py", "broker/cluster_hooks.py", "broker/registry.py",
    "broker/commands/jobs.py", "broker/commands/getjob.py", "broker/commands/states.py",
    "broker/commands/args.py", "broker/commands/table.py",
    # The cluster's per-job path: bus frames (REPLJOB, GOTJOB, acks, requeues:
    # encode, decode, shape checks), their handlers and the output driver, and
    # what the cluster layer hands the driver (a Send per peer per turn).
    "cluster/outputs.py",
    "protocol/bus.py", "cluster/cluster.py", "cluster/replication.py", "cluster/acks.py",
    "cluster/requeue.py", "server/driver.py", "cluster/membership.py",
    "cluster/outbox.py", "cluster/tombstones.py", "cluster/subprotocol.py",
    # The client connection's read -> parse -> dispatch -> encode -> write loop,
    # and the node's clock (read by every ADDJOB); the bus links' read -> decode
    # -> handle and send -> write (one call per frame each way); the flush and
    # timer scheduled after every input.
    "server/resp.py", "server/clock.py", "server/bus.py", "server/schedule.py",
]

ext_modules = []
if os.environ.get("DISQUETTE_NO_EXTENSIONS", "") in ("", "0"):
    # Build requirements (pyproject.toml), imported only for a compiled build.
    from Cython.Build import cythonize
    from mypyc.build import mypycify

    ext_modules = cythonize(["protocol/request_c.pyx", "protocol/bus_c.pyx"],
                            language_level=3)
    # mypy reads the modules these import for their types, without checking them.
    ext_modules += mypycify(["--follow-imports=silent", "--ignore-missing-imports", *CORE])

setup(ext_modules=ext_modules)
