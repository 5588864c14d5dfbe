"""Administration of one node: starting it (config file, command line, dir,
logfile, pidfile, console script), INFO, CONFIG (GET/SET/REWRITE/RESETSTAT),
CLIENT, COMMAND, AUTH/requirepass, the HELLO 2/3 handshake, DEBUG, SHUTDOWN,
PING/ECHO/TIME/QUIT and the generic errors."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.harness import WAIT_TIMEOUT, NodeProcess, NodeStartError, encode_command, wait_until


def info_fields(raw_reply: bytes) -> dict[str, str]:
    assert raw_reply.startswith(b"$"), raw_reply[:50]
    body = raw_reply.split(b"\r\n", 1)[1]
    out = {}
    for line in body.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = v
    return out


# ------------------------------------------------------------ starting a node
CONF_WITH_COMMENTS = """\
# Disque configuration file, as an operator writes it.

# Keep it small for the test.
maxmemory 200mb   
# a comment between directives
loglevel notice
maxclients 77

# the port is overridden on the command line
port 6
hz 10
"""


def start_with_conf(tmp_path, conf_text, *args, cmd_prefix=None):
    d = tmp_path / "node"
    d.mkdir()
    (d / "disque.conf").write_text(conf_text)
    cmd = cmd_prefix or [sys.executable, "-m", "server"]
    # argv: <cmd> disque.conf --port P --dir D [args]; cwd is the node dir, so
    # the relative config path is relative to where the server was started.
    n = NodeProcess(d, cmd=[*cmd, "disque.conf"], args=list(args))
    return n.start()


def test_config_file_then_command_line_overrides(tmp_path):
    n = start_with_conf(tmp_path, CONF_WITH_COMMENTS)
    try:
        c = n.client()
        assert c.config_get("port") == {"port": str(n.port)}
        assert c.config_get("maxclients") == {"maxclients": "77"}
        assert c.config_get("maxmemory") == {"maxmemory": str(200 * 1024 * 1024)}
        info = info_fields(n.raw().call("INFO", "server"))
        assert info["config_file"] == str(n.dir / "disque.conf")
        assert info["tcp_port"] == str(n.port)
    finally:
        n.stop()


def test_config_rewrite_keeps_comments(tmp_path):
    n = start_with_conf(tmp_path, CONF_WITH_COMMENTS)
    try:
        r = n.raw()
        assert r.call("CONFIG", "SET", "maxmemory", "300mb") == b"+OK\r\n"
        assert r.call("CONFIG", "SET", "loglevel", "warning") == b"+OK\r\n"
        assert r.call("CONFIG", "SET", "slowlog-max-len", "33") == b"+OK\r\n"
        assert r.call("CONFIG", "REWRITE") == b"+OK\r\n"
        text = (n.dir / "disque.conf").read_text()
        lines = text.splitlines()
        # Comments and blank lines stay where they were.
        for comment in ("# Disque configuration file, as an operator writes it.",
                        "# Keep it small for the test.", "# a comment between directives",
                        "# the port is overridden on the command line"):
            assert comment in lines
        assert lines[0] == "# Disque configuration file, as an operator writes it."
        assert lines.index("# a comment between directives") < \
            next(i for i, l in enumerate(lines) if l.startswith("loglevel "))
        assert "loglevel warning" in lines
        assert any(l.split()[:1] == ["maxmemory"] and l.split()[1] in ("300mb", str(300 << 20))
                   for l in lines)
        assert "slowlog-max-len 33" in lines
        assert "maxclients 77" in lines
        assert sum(1 for l in lines if l.startswith("maxmemory")) == 1
        # Restarted from the rewritten file, the node has the new values.
        n.restart()
        c = n.client()
        assert c.config_get("maxmemory") == {"maxmemory": str(300 << 20)}
        assert c.config_get("loglevel") == {"loglevel": "warning"}
        assert c.config_get("slowlog-max-len") == {"slowlog-max-len": "33"}
    finally:
        n.stop()


def test_config_rewrite_without_a_file(snode):
    reply = snode.raw().call("CONFIG", "REWRITE")
    assert reply.startswith(b"-ERR ") and b"config file" in reply


def test_console_script_and_relative_dir_logfile_pidfile(tmp_path):
    script = Path(sys.executable).parent / "disquette-server"
    assert script.exists(), "the disquette-server console script is not installed"
    d = tmp_path / "node"
    d.mkdir()
    # --dir given twice: the later, relative one wins, relative to the start cwd.
    n = NodeProcess(d, cmd=[str(script)],
                    args=["--dir", "data", "--logfile", "disque.log",
                          "--pidfile", "disque.pid"])
    (d / "data").mkdir()
    n.start()
    try:
        pidfile = d / "data" / "disque.pid"
        logfile = d / "data" / "disque.log"
        wait_until(pidfile.exists)
        assert pidfile.read_text().strip() == str(n.pid)
        wait_until(lambda: "Ready to accept connections" in logfile.read_text())
        info = info_fields(n.raw().call("INFO", "server"))
        assert info["process_id"] == str(n.pid)
        assert (d / "data").samefile(Path(f"/proc/{n.pid}/cwd").resolve())
        r = n.raw()
        r.send(encode_command("SHUTDOWN"))
        assert r.read_until_closed() == b""
        assert n.wait_exit() == 0
    finally:
        n.stop()
    assert not (d / "data" / "disque.pid").exists()
    assert "bye" in (d / "data" / "disque.log").read_text()


def test_bad_config_file_refuses_to_start(tmp_path):
    d = tmp_path / "node"
    d.mkdir()
    (d / "disque.conf").write_text("maxclients notanumber\n")
    n = NodeProcess(d, cmd=[sys.executable, "-m", "server", "disque.conf"])
    with pytest.raises(NodeStartError, match="exited with code"):
        n.start()
    assert n.returncode not in (None, 0)
    assert "FATAL CONFIG FILE ERROR" in n.log()


# ------------------------------------------------------------------- SHUTDOWN
def test_shutdown_closes_without_reply_and_exits(node_factory):
    n = node_factory(pidfile="disque.pid")
    pidfile = n.dir / "disque.pid"
    assert pidfile.exists()
    other = n.raw()
    r = n.raw()
    r.send(encode_command("SHUTDOWN"))
    assert r.read_until_closed() == b""
    assert n.wait_exit() == 0
    assert other.is_closed()
    assert not pidfile.exists()


@pytest.mark.parametrize("mode", ["NOSAVE", "nosave", "SAVE"])
def test_shutdown_modes(node_factory, mode):
    n = node_factory()
    r = n.raw()
    r.send(encode_command("SHUTDOWN", mode))
    assert r.read_until_closed() == b""
    assert n.wait_exit() == 0


def test_shutdown_bad_argument_keeps_running(snode):
    assert snode.raw().call("SHUTDOWN", "SOMETIMES") == b"-ERR syntax error\r\n"
    assert snode.raw().call("PING") == b"+PONG\r\n"


def test_sigterm_exits_cleanly(node_factory):
    n = node_factory()
    n.proc.send_signal(signal.SIGTERM)
    assert n.wait_exit() == 0
    assert "bye" in n.log()


# ----------------------------------------------------------------------- INFO
def test_info_sections(snode):
    r = snode.raw()
    r.call("ADDJOB", "q", "b", "0")
    raw = r.call("INFO")
    text = raw.decode()
    for section in ("# Server", "# Clients", "# Memory", "# Jobs", "# Queues",
                    "# Persistence", "# Stats", "# Cpu"):
        assert section in text
    assert "# Commandstats" not in text
    f = info_fields(raw)
    assert f["registered_jobs"] == "1" and f["registered_queues"] == "1"
    assert f["aof_enabled"] == "0" and f["aof_state"] == "off" and f["loading"] == "0"
    assert int(f["connected_clients"]) >= 1
    assert int(f["used_memory"]) > 0 and int(f["maxmemory"]) == 1 << 30
    assert f["tcp_port"] == str(snode.port)
    assert f["process_id"] == str(snode.pid)
    assert len(f["run_id"]) == 40


def test_info_single_section_and_all(snode):
    r = snode.raw()
    jobs = r.call("INFO", "jobs").decode()
    assert jobs.split("\r\n")[1:3] == ["# Jobs", "registered_jobs:0"]
    assert "# Server" not in jobs
    assert info_fields(r.call("INFO", "QUEUES")) == {"registered_queues": "0"}
    everything = r.call("INFO", "all").decode()
    assert "# Commandstats" in everything and "cmdstat_info:calls=" in everything
    assert "cmdstat_info:calls=" in r.call("INFO", "commandstats").decode()
    assert r.call("INFO", "nosuchsection") == b"$0\r\n\r\n"


def test_info_with_redis_py(snode):
    for proto in (2, 3):
        info = snode.client(protocol=proto).info()
        assert info["registered_jobs"] == 0 and info["aof_enabled"] == 0


# --------------------------------------------------------------------- CONFIG
def test_config_get(snode):
    r = snode.raw()
    assert r.call("CONFIG", "GET", "maxmemory") == b"*2\r\n$9\r\nmaxmemory\r\n$10\r\n1073741824\r\n"
    allc = snode.client(protocol=2).config_get("*")
    for name in ("port", "bind", "dir", "maxmemory", "appendonly", "appendfsync",
                 "requirepass", "maxclients", "proto-max-bulk-len",
                 "client-query-buffer-limit", "cluster-node-timeout", "loglevel"):
        assert name in allc, name
    assert allc["appendonly"] == "no" and allc["port"] == str(snode.port)
    assert allc["bind"] == "127.0.0.1"
    assert snode.client().config_get("max*").keys() >= {"maxmemory", "maxclients"}
    assert r.call("CONFIG", "GET", "nosuch") == b"*0\r\n"
    r.call("HELLO", "3")
    assert r.call("CONFIG", "GET", "maxclients") == b"%1\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n"


def test_config_set(snode):
    r = snode.raw()
    try:
        assert r.call("CONFIG", "SET", "maxmemory", "2gb") == b"+OK\r\n"
        assert r.call("CONFIG", "GET", "maxmemory") == b"*2\r\n$9\r\nmaxmemory\r\n$10\r\n2147483648\r\n"
        assert r.call("CONFIG", "SET", "maxclients", "500", "hz", "20") == b"+OK\r\n"
        assert snode.client().config_get("hz") == {"hz": "20"}
        for args in (("nosuch", "1"), ("maxclients", "abc"), ("maxmemory", "0"),
                     ("port", "1234"), ("appendfsync", "sometimes"),
                     ("client-query-buffer-limit", "1000"), ("loglevel", "loud")):
            reply = r.call("CONFIG", "SET", *args)
            assert reply.startswith(b"-ERR "), (args, reply)
        assert r.call("CONFIG", "SET", "maxclients") == (
            b"-ERR Wrong number of arguments for CONFIG SET\r\n")
        assert r.call("CONFIG", "GET", "port") == b"*2\r\n$4\r\nport\r\n$%d\r\n%d\r\n" % (
            len(str(snode.port)), snode.port)
        assert r.call("CONFIG", "BOGUS") == (
            b"-ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE\r\n")
    finally:
        r.call("CONFIG", "SET", "maxmemory", "1gb", "maxclients", "10000", "hz", "10")


def test_config_resetstat(snode):
    r = snode.raw()
    r.call("PING")
    assert b"cmdstat_ping" in r.call("INFO", "commandstats")
    assert r.call("CONFIG", "RESETSTAT") == b"+OK\r\n"
    assert b"cmdstat_ping" not in r.call("INFO", "commandstats")


# --------------------------------------------------------------------- CLIENT
def test_client_commands(snode):
    r = snode.raw()
    cid = r.call("CLIENT", "ID")
    assert cid.startswith(b":")
    cid = int(cid[1:-2])
    assert r.call("CLIENT", "GETNAME") == b"$-1\r\n"
    assert r.call("CLIENT", "SETNAME", "worker-1") == b"+OK\r\n"
    assert r.call("CLIENT", "GETNAME") == b"$8\r\nworker-1\r\n"
    assert r.call("CLIENT", "SETNAME", "bad name").startswith(b"-ERR Client names cannot")
    assert r.call("CLIENT", "SETINFO", "lib-name", "mylib") == b"+OK\r\n"
    assert r.call("CLIENT", "SETINFO", "lib-ver", "1.2") == b"+OK\r\n"
    assert r.call("CLIENT", "SETINFO", "nonsense", "1").startswith(b"-ERR ")
    listing = r.call("CLIENT", "LIST")
    assert listing.startswith(b"$")
    mine = [l for l in listing.split(b"\n") if l.startswith(b"id=%d " % cid)]
    assert len(mine) == 1
    assert b" name=worker-1 " in mine[0] and b" lib-name=mylib " in mine[0]
    assert b" lib-ver=1.2 " in mine[0] and b" cmd=client " in mine[0]
    only = r.call("CLIENT", "LIST", "ID", str(cid))
    assert only.count(b"id=") == 1
    assert r.call("CLIENT", "NOSUCH") == (b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port "
                                          b"| GETNAME | SETNAME connection-name)\r\n")


def test_client_kill(snode):
    r = snode.raw()
    victim = snode.raw()
    vid = int(victim.call("CLIENT", "ID")[1:-2])
    assert r.call("CLIENT", "KILL", "ID", str(vid)) == b":1\r\n"
    assert victim.is_closed()
    assert r.call("CLIENT", "KILL", "ID", str(vid)) == b":0\r\n"
    victim2 = snode.raw()
    addr = [l for l in snode.raw().call("CLIENT", "LIST").split(b"\n")
            if l.startswith(b"id=%s " % victim2.call("CLIENT", "ID")[1:-2])][0]
    addr = addr.split(b" addr=")[1].split(b" ")[0]
    assert r.call("CLIENT", "KILL", addr) == b"+OK\r\n"
    assert victim2.is_closed()
    assert r.call("CLIENT", "KILL", "127.0.0.1:1") == b"-ERR No such client\r\n"
    # Killing a blocked client unblocks it cleanly.
    blocked = snode.raw()
    bid = blocked.call("CLIENT", "ID")[1:-2]
    blocked.send(encode_command("GETJOB", "FROM", "q"))
    wait_until(lambda: b"blocked_clients:1" in snode.raw().call("INFO", "clients"))
    assert r.call("CLIENT", "KILL", "ID", bid) == b":1\r\n"
    assert blocked.is_closed()
    wait_until(lambda: b"blocked_clients:0" in snode.raw().call("INFO", "clients"))
    r.call("ADDJOB", "q", "b", "0")
    assert r.call("QLEN", "q") == b":1\r\n"


# -------------------------------------------------------------------- COMMAND
def test_command(snode):
    c = snode.client(protocol=2)
    r = snode.raw()
    count = r.call("COMMAND", "COUNT")
    assert count.startswith(b":")
    n = int(count[1:-2])
    table = c.execute_command("COMMAND")
    assert len(table) == n
    for name in ("addjob", "getjob", "ackjob", "fastack", "nack", "working", "enqueue",
                 "dequeue", "deljob", "show", "qlen", "qpeek", "qstat", "qscan", "jscan",
                 "pause", "hello", "info", "config", "debug", "ping", "echo", "time",
                 "command", "client", "auth", "shutdown", "quit"):
        assert name in table, name
    info = r.call("COMMAND", "INFO", "addjob", "nosuch")
    assert info.startswith(b"*2\r\n*10\r\n$6\r\naddjob\r\n:-4\r\n")
    assert info.endswith(b"$-1\r\n") or info.endswith(b"*-1\r\n")
    # redis-py parses COMMAND into a dict by name, in both protocols.
    assert set(snode.client().command()) == set(table)
    assert table["addjob"]["arity"] == -4 and "denyoom" in table["addjob"]["flags"]
    r.call("HELLO", "3")
    docs = r.call("COMMAND", "DOCS", "getjob")
    assert docs.startswith(b"%1\r\n$6\r\ngetjob\r\n%") and b"GETJOB [NOHANG]" in docs


# ---------------------------------------------------------------- AUTH / HELLO
def test_requirepass(node_factory):
    n = node_factory(requirepass="s3cret")
    r = n.raw()
    assert r.call("PING") == b"-NOAUTH Authentication required.\r\n"
    assert r.call("ADDJOB", "q", "b", "0") == b"-NOAUTH Authentication required.\r\n"
    assert r.call("AUTH", "wrong") == b"-ERR invalid password\r\n"     # Disque's words
    assert r.call("AUTH", "someone", "s3cret").startswith(b"-WRONGPASS")
    assert r.call("HELLO", "3").startswith(b"-NOAUTH HELLO must be called")
    assert r.call("AUTH", "s3cret") == b"+OK\r\n"
    assert r.call("PING") == b"+PONG\r\n"
    r2 = n.raw()
    assert r2.call("AUTH", "default", "s3cret") == b"+OK\r\n"
    # HELLO with AUTH and SETNAME in one go.
    r3 = n.raw()
    reply = r3.call("HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "w1")
    assert reply.startswith(b"%7\r\n")
    assert r3.call("CLIENT", "GETNAME") == b"$2\r\nw1\r\n"
    assert r3.call("SHOW", "D-deadbeef-AAAAAAAAAAAAAAAAAAAAAAAA-05a1") == b"_\r\n"
    assert n.raw().call("HELLO", "2", "AUTH", "default", "nope").startswith(b"-WRONGPASS")
    # redis-py with a password, both protocols; redis-cli -a.
    for proto in (2, 3):
        assert n.client(protocol=proto, password="s3cret").execute_command("QLEN", "q") == 0
    no_retry = Retry(NoBackoff(), 0)
    with pytest.raises(redis.AuthenticationError):
        n.client(password="wrong", retry=no_retry).ping()
    assert n.cli("-a", "s3cret", "--no-auth-warning", "PING") == "PONG\n"
    # Changed at run time: new connections need the new password.
    assert r.call("CONFIG", "SET", "requirepass", "other") == b"+OK\r\n"
    assert n.raw().call("AUTH", "s3cret") == b"-ERR invalid password\r\n"
    assert n.raw().call("AUTH", "other") == b"+OK\r\n"
    assert r.call("CONFIG", "SET", "requirepass", "") == b"+OK\r\n"
    assert n.raw().call("PING") == b"+PONG\r\n"


def test_auth_without_password_configured(snode):
    assert snode.raw().call("AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"
    # AUTH user pass (ext, Redis 6) answers as Redis does.
    assert snode.raw().call("AUTH", "default", "x") == (
        b"-ERR AUTH <password> called without any password configured for the default user. "
        b"Are you sure your configuration is correct?\r\n")


def test_hello_handshake(snode):
    r = snode.raw()
    reply = r.call("HELLO", "3")
    assert reply.startswith(b"%7\r\n$6\r\nserver\r\n")
    assert b"$5\r\nproto\r\n:3\r\n" in reply and b"$7\r\nmodules\r\n*0\r\n" in reply
    assert b"$4\r\nrole\r\n$6\r\nmaster\r\n" in reply
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"_\r\n"
    reply = r.call("HELLO", "2", "SETNAME", "back-to-2")
    assert reply.startswith(b"*14\r\n$6\r\nserver\r\n")
    assert b"$5\r\nproto\r\n:2\r\n" in reply
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    assert r.call("CLIENT", "GETNAME") == b"$9\r\nback-to-2\r\n"
    assert r.call("HELLO", "4") == b"-NOPROTO unsupported protocol version\r\n"
    assert r.call("HELLO", "x").startswith(b"-ERR Protocol version is not an integer")
    assert r.call("HELLO", "3", "BOGUS").startswith(b"-ERR Syntax error in HELLO option")
    assert r.call("HELLO", "3", "AUTH", "default").startswith(b"-ERR Syntax error")
    # A failed HELLO does not switch protocol.
    assert r.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"


def test_bare_hello_is_disque_topology(snode):
    r = snode.raw()
    reply = r.call("HELLO")
    myid = reply.split(b"\r\n")[3]
    assert len(myid) == 40
    port = str(snode.port).encode()
    assert reply == (b"*3\r\n:1\r\n$40\r\n" + myid + b"\r\n*4\r\n$40\r\n" + myid +
                     b"\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (len(port), port))
    r.call("HELLO", "3")
    assert r.call("HELLO") == reply      # the same under RESP3


# --------------------------------------------------------------------- DEBUG
def test_debug_flushall(snode):
    c = snode.client()
    c.execute_command("ADDJOB", "a", "b", 0)
    c.execute_command("ADDJOB", "b", "b", 0, "DELAY", 100)
    assert snode.raw().call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    f = info_fields(snode.raw().call("INFO"))
    assert f["registered_jobs"] == "0" and f["registered_queues"] == "0"
    assert c.execute_command("QLEN", "a") == 0
    assert c.execute_command("JSCAN", "BUSYLOOP") == [b"0", []]


def test_debug_flushall_keeps_blocked_clients_working(snode):
    w = snode.raw()
    w.send(encode_command("GETJOB", "FROM", "q"))      # blocks until a job comes
    wait_until(lambda: b"blocked_clients:1" in snode.raw().call("INFO", "clients"))
    assert snode.raw().call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    jid = snode.raw().call("ADDJOB", "q", "b", "0")[1:-2]
    assert jid in w.read_reply()


def test_debug_sleep_blocks_the_server(snode):
    r = snode.raw()
    other = snode.raw()

    def a_ping_waited_for_the_sleep() -> bool:
        # PING from another client until DEBUG SLEEP answers: the PING sent
        # while the node sleeps is answered after it, and only then.  A loaded
        # machine may get no PING in while the node sleeps: another round.
        t0 = time.monotonic()
        r.send(encode_command("DEBUG", "SLEEP", "0.3"))
        held, reply = False, b""
        while not reply:
            t = time.monotonic()
            assert other.call("PING") == b"+PONG\r\n"
            reply = r.read_available(0)
            held = held or (reply != b"" and time.monotonic() - t >= 0.1)
        assert reply == b"+OK\r\n"
        assert time.monotonic() - t0 >= 0.29
        return held
    wait_until(a_ping_waited_for_the_sleep,
               message="another client was answered while DEBUG SLEEP ran")
    # Disque reads the seconds with strtod: no number is 0 s.
    assert r.call("DEBUG", "SLEEP", "x") == b"+OK\r\n"
    assert r.call("DEBUG", "NOSUCH") == (
        b"-ERR Unknown DEBUG subcommand or wrong number of arguments for 'NOSUCH'\r\n")


# --------------------------------------------------------- small commands
def test_ping_echo_time_quit(snode):
    r = snode.raw()
    assert r.call("PING") == b"+PONG\r\n"
    assert r.call("PING", "hi there") == b"$8\r\nhi there\r\n"
    assert r.call("PING", "a", "b") == b"-ERR wrong number of arguments for 'ping' command\r\n"
    assert r.call("ECHO", b"\x00bin\r\n") == b"$6\r\n\x00bin\r\n\r\n"
    t = r.call("TIME")
    parts = t.split(b"\r\n")
    assert parts[0] == b"*2" and parts[1].startswith(b"$") and parts[3].startswith(b"$")
    assert abs(int(parts[2]) - time.time()) < 5 and 0 <= int(parts[4]) < 1_000_000
    q = snode.raw()
    assert q.call("QUIT") == b"+OK\r\n"
    assert q.is_closed()


def test_unknown_command_and_wrong_arity(snode):
    r = snode.raw()
    assert r.call("NOSUCHCMD", "a").startswith(b"-ERR unknown command 'NOSUCHCMD'")
    assert r.call("addjob", "q") == b"-ERR wrong number of arguments for 'addjob' command\r\n"
    assert r.call("ECHO") == b"-ERR wrong number of arguments for 'echo' command\r\n"
    assert r.call("PING") == b"+PONG\r\n"


def test_monitor_and_slowlog(snode):
    m = snode.raw()
    assert m.call("MONITOR") == b"+OK\r\n"
    snode.raw().call("QLEN", "watched")
    line = m.read_reply()
    assert line.startswith(b"+") and b'"QLEN" "watched"' in line
    r = snode.raw()
    assert r.call("SLOWLOG", "RESET") == b"+OK\r\n"
    assert r.call("SLOWLOG", "LEN") == b":0\r\n"
    assert r.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == b"+OK\r\n"
    try:
        r.call("PING")
        r.call("ECHO", "slow?")
        entries = snode.client(protocol=2).execute_command("SLOWLOG", "GET", 100)
        assert [b"ECHO", b"slow?"] in [e[3] for e in entries]
    finally:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", "10000")


def test_slowlog_cuts_arguments_as_disque(node):
    """Disque's slowlog.c: at most 32 arguments, the last one saying how many
    more there were, each at most 128 bytes and how many more; ids from 0."""
    r = node.raw()
    assert r.call("CONFIG", "SET", "slowlog-log-slower-than", "0") == b"+OK\r\n"
    # COMMAND INFO takes any number of names: 40 arguments, one of 200 bytes.
    names = ["a" * 200, *(str(i) for i in range(3, 40))]
    r.call("COMMAND", "INFO", *names)
    r.call("COMMAND", "INFO", "x", "b" * 129)
    c = node.client(protocol=2, driver_info=None)   # no CLIENT SETINFO on connect
    entries = c.execute_command("SLOWLOG", "GET", 3)
    assert [e[0] for e in entries] == [2, 1, 0]      # CONFIG SET is entry 0
    assert entries[2][3] == [b"CONFIG", b"SET", b"slowlog-log-slower-than", b"0"]
    assert entries[1][3] == [b"COMMAND", b"INFO", b"a" * 128 + b"... (72 more bytes)",
                             *(str(i).encode() for i in range(3, 31)),
                             b"... (9 more arguments)"]
    assert entries[0][3] == [b"COMMAND", b"INFO", b"x", b"b" * 128 + b"... (1 more bytes)"]
    # Our extension (docs/clients.md): the client's address and name follow.
    assert entries[0][4].startswith(b"127.0.0.1:") and entries[0][5] == b""
    assert c.execute_command("SLOWLOG", "LEN") == 4     # and this GET
    assert c.execute_command("SLOWLOG", "RESET") == b"OK"
    assert [e[0] for e in c.execute_command("SLOWLOG", "GET")] == [5]   # RESET itself


def test_bgrewriteaof_without_aof_writes_the_file_as_disque(node_factory):
    """With appendonly no, Disque still rewrites: appendfilename, in dir,
    holding the jobs of the moment; a node started on it with the AOF on
    has them."""
    n = node_factory(appendfilename="jobs.aof")
    c = n.client()
    ids = {c.execute_command("ADDJOB", "q", f"b{i}", 0) for i in range(3)}
    assert n.raw().call("BGREWRITEAOF") == b"+Background append only file rewriting started\r\n"
    assert (n.dir / "jobs.aof").exists()
    n.terminate()
    n.args += ["--appendonly", "yes"]
    n.start()
    cursor, held = n.client().execute_command("JSCAN", 0, "BUSYLOOP")
    assert set(held) == ids


def test_config_set_dir_changes_directory(snode):
    r = snode.raw()
    old = r.call("CONFIG", "GET", "dir").split(b"\r\n")[-2].decode()
    sub = Path(old) / "elsewhere"
    sub.mkdir(exist_ok=True)
    try:
        assert r.call("CONFIG", "SET", "dir", "/nonexistent/dir") == (
            b"-ERR CONFIG SET failed (possibly related to argument 'dir') - "
            b"No such file or directory\r\n")
        assert r.call("CONFIG", "GET", "dir") == b"*2\r\n$3\r\ndir\r\n$%d\r\n%s\r\n" % (
            len(old), old.encode())
        assert r.call("CONFIG", "SET", "dir", str(sub)) == b"+OK\r\n"
        assert Path(f"/proc/{snode.pid}/cwd").resolve() == sub.resolve()
    finally:
        assert r.call("CONFIG", "SET", "dir", old) == b"+OK\r\n"


def test_idle_client_timeout(snode):
    r = snode.raw()
    try:
        assert r.call("CONFIG", "SET", "timeout", "1") == b"+OK\r\n"
        idle = snode.raw()
        t0 = time.monotonic()           # before its last command: a lower bound
        assert idle.call("PING") == b"+PONG\r\n"
        blocked = snode.raw()
        blocked.send(encode_command("GETJOB", "TIMEOUT", "2500", "FROM", "idle-q"))
        # The idle client is closed after about a second; the active one is not.
        while not idle.is_closed(0.2):
            assert r.call("PING") == b"+PONG\r\n"
            assert time.monotonic() - t0 < WAIT_TIMEOUT, "idle client not closed"
        assert time.monotonic() - t0 >= 0.9
        # A blocked client waits for its own TIMEOUT instead.
        assert blocked.read_reply() == b"*-1\r\n"
    finally:
        snode.raw().call("CONFIG", "SET", "timeout", "0")
