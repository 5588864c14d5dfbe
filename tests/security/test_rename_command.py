"""rename-command (Redis' and Disque's directive, config file or command line
only): hide or rename DEBUG, CONFIG, SHUTDOWN..."""

from __future__ import annotations

import sys

import pytest

from tests.harness import NodeProcess, NodeStartError

CONF = """\
# Operators hide what clients must not run.
rename-command CONFIG "ops-config-7f3a"
rename-command debug ""
rename-command SHUTDOWN ""
maxclients 100
"""


def start(tmp_path, conf: str, *args: str, name: str = "n") -> NodeProcess:
    d = tmp_path / name
    d.mkdir()
    (d / "disque.conf").write_text(conf)
    return NodeProcess(d, cmd=[sys.executable, "-m", "server", "disque.conf"], args=list(args))


def test_renamed_and_removed_commands(tmp_path):
    with start(tmp_path, CONF, "--rename-command", "qpeek", "peek").start() as n:
        r = n.raw()
        assert r.call("CONFIG", "GET", "maxclients") == b"-ERR unknown command 'CONFIG'\r\n"
        assert r.call("DEBUG", "FLUSHALL") == b"-ERR unknown command 'DEBUG'\r\n"
        assert r.call("SHUTDOWN") == b"-ERR unknown command 'SHUTDOWN'\r\n"
        assert r.call("QPEEK", "q", "1") == b"-ERR unknown command 'QPEEK'\r\n"
        # The new names work, in any case, from any client.
        assert r.call("ops-config-7f3a", "GET", "maxclients") == \
            b"*2\r\n$10\r\nmaxclients\r\n$3\r\n100\r\n"
        assert n.cli("OPS-CONFIG-7F3A", "GET", "maxclients") == "maxclients\n100\n"
        assert r.call("PEEK", "q", "1") == b"*0\r\n"
        names = set(n.cli("COMMAND", "LIST").split())
        assert {"ops-config-7f3a", "peek", "addjob"} <= names
        assert not {"config", "debug", "shutdown", "qpeek"} & names
        assert r.call("COMMAND", "COUNT") == b":%d\r\n" % len(names)
        # Not a CONFIG GET directive (as in Redis), and REWRITE keeps the lines.
        assert r.call("ops-config-7f3a", "GET", "rename-command") == b"*0\r\n"
        assert r.call("ops-config-7f3a", "SET", "maxclients", "99") == b"+OK\r\n"
        assert r.call("ops-config-7f3a", "REWRITE") == b"+OK\r\n"
        text = (n.dir / "disque.conf").read_text()
        assert 'rename-command CONFIG "ops-config-7f3a"' in text
        assert 'rename-command debug ""' in text and "maxclients 99" in text
    # SIGTERM still stops it cleanly (SHUTDOWN is gone, signals are not).
    assert n.returncode == 0


@pytest.mark.parametrize("conf, reason", [
    ("rename-command NOSUCH other\n", "No such command in rename-command"),
    ("rename-command ping addjob\n", "Target command name already exists"),
    ("rename-command config x\nrename-command config y\n", "No such command in rename-command"),
    ("rename-command config\n", "Bad directive or wrong number of arguments"),
])
def test_a_bad_rename_stops_the_node_with_redis_message(tmp_path, conf, reason):
    n = start(tmp_path, conf)
    with pytest.raises(NodeStartError, match="exited with code 1"):
        n.start()
    log = n.log()
    assert "*** FATAL CONFIG FILE ERROR ***" in log and reason in log
    bad_line = conf.splitlines()[-1]
    assert f">>> '{bad_line}'" in log
