"""The chaos suite: fault injection against real Disquette processes.

- ``chaos.proxy``: a fault proxy speaking Toxiproxy's HTTP API;
- ``chaos.toxiproxy_client``: toxiproxy-python with the calls it lacks;
- ``chaos.history``: the JSON-lines history a run writes;
- ``chaos.checker``: the total-queue verdict over a history;
- ``chaos.report``: terminal table, JSON and HTML timeline, and the summary
  of many runs (one table per kind of fault);
- ``chaos.netns``: packet loss with iptables, in the run's own network namespace.

``python -m chaos check HISTORY`` re-checks a recorded run.
"""
