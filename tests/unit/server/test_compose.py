"""server/compose.py: every node (the process's, the in-process one, the
simulator's) is composed the same way, so what the config says about the node
itself (rename-command, the saved node table) holds in tests and simulations
as it does in the process."""

from __future__ import annotations

import pytest

from broker.config import Config, ConfigError
from protocol.resp import Error, Status
from server.sim.inprocess import InProcessNode


def renamed_config(text: str) -> Config:
    config = Config()
    config.load_text(text)
    return config


def test_rename_command_applies_to_the_in_process_node():
    n = InProcessNode(renamed_config('rename-command ADDJOB "put"\nrename-command debug ""\n'))
    assert n.call("ADDJOB", "q", "x", 0) == Error("ERR unknown command 'ADDJOB'")
    assert n.call("DEBUG", "FLUSHALL") == Error("ERR unknown command 'DEBUG'")
    jid = n.call("PUT", "q", "x", 0)
    assert isinstance(jid, Status) and jid.startswith("D-")
    assert n.call("QLEN", "q") == 1


def test_a_refused_rename_command_is_the_config_error_the_process_gives():
    with pytest.raises(ConfigError, match="No such command in rename-command"):
        InProcessNode(renamed_config("rename-command NOSUCH other\n"))


def test_a_node_restarted_from_its_saved_table_keeps_its_id_and_peers():
    me, peer = "a" * 40, "b" * 40
    saved = f"{me} 127.0.0.1:7711@17711 myself\n{peer} 10.0.0.2:7711@17711 noflags\n"
    n = InProcessNode(saved_nodes_conf=saved)
    assert n.node.myself_id == me
    assert set(n.cluster.m.known_ids()) == {me, peer}
    fresh = InProcessNode(saved_nodes_conf=None)
    assert fresh.node.myself_id not in (me, peer) and len(fresh.node.myself_id) == 40
