"""The deterministic simulator: whole clusters of the server's own pieces (node,
cluster layer, output driver, AOF writer) in one thread, on simulated devices,
from one seed. In the server layer, as it composes the production server over
those devices.

- clock.py: the virtual clock, and time and timers as the server's pieces read
  them, in virtual time;
- disk.py: a host's disk (a file system that loses what was not fsynced);
- network.py: partitions, cuts, dropped, duplicated and delayed messages;
- simulation.py: hosts, crashes and restarts, the event queue, the trace;
- inprocess.py: a whole node in this process (also the unit tests' node);
- broker_node.py: that node as a simulated host's process;
- workload.py: producers, consumers and faults, drawn from the seed;
- checker.py: the invariants (SPEC section 9), checked on what the workload saw.
"""
