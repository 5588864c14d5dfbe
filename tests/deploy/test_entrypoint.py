"""The image's start script, run for real: nodes started by
deploy/docker/entrypoint.sh with the image's environment (parsed from the
Dockerfile) plus DISQUETTE_* variables, as a container would start them."""

from __future__ import annotations

import pytest

from tests.deploy.deploy_kit import ENTRYPOINT, VENV_BIN, EntrypointNode, ctl, run
from disquette.testing import pid_listens_on
from tests.harness import RawConn, cluster_info, free_port, join, wait_until
from tests.security.certs import CA
from tests.security.security_kit import client_context, tls_call


@pytest.fixture
def start(tmp_path):
    """``start(env={...}, args=[...])`` -> a started EntrypointNode; all are
    stopped at teardown."""
    nodes: list[EntrypointNode] = []

    def start(env=None, args=(), port=None, wait=True):
        n = EntrypointNode(tmp_path / f"node{len(nodes)}", args, env, port=port)
        nodes.append(n)
        return n.start() if wait else n

    start.nodes = nodes
    yield start
    for n in reversed(nodes):
        n.stop()


def config_get(n, name: str) -> str:
    return n.client().config_get(name)[name]


def hello_ports(n) -> dict[str, str]:
    """node id -> port, as HELLO on ``n`` lists the nodes."""
    reply = n.client().execute_command("HELLO")
    return {e[0].decode(): e[2].decode() for e in reply[2:]}


def test_three_nodes_started_by_the_entrypoint_form_a_cluster(start):
    announced = free_port()
    env = {"DISQUETTE_APPENDONLY": "yes", "DISQUETTE_ANNOUNCE_IP": "127.0.0.1"}
    nodes = [start(env), start(env), start({**env, "DISQUETTE_ANNOUNCE_PORT": str(announced)})]
    for n in nodes:
        # exec: the process the container runtime started is the server itself,
        # so SIGTERM reaches it.
        assert pid_listens_on(n.pid, n.port) is not False
        assert config_get(n, "appendonly") == "yes"
        assert config_get(n, "dir") == str(n.dir)
        assert config_get(n, "cluster-announce-ip") == "127.0.0.1"
    # (test_nodes_join_through_seeds joins nodes the image's way.)
    join(nodes)

    c = nodes[0].client()
    job = c.execute_command("ADDJOB", "q", "body", 5000, "REPLICATE", 3)
    assert c.execute_command("SHOW", job)[7] == 3  # repl
    # Peers show the port the third node announces, not the one it listens on.
    third = nodes[2].client().execute_command("CLUSTER", "MYID").decode()
    assert hello_ports(nodes[0])[third] == str(announced)

    for n in nodes:
        assert n.terminate() == 0
        assert (n.dir / "nodes.conf").exists()
        assert (n.dir / "disque.aof").exists()


def test_nodes_join_through_seeds(start):
    ports = [free_port() for _ in range(3)]
    seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
    nodes = [start({"DISQUETTE_SEEDS": seeds}, port=p, wait=False) for p in ports]
    for n in nodes:
        n.start()

    def joined():
        return all(cluster_info(n).get("cluster_reachable_nodes") == "2" for n in nodes)

    wait_until(joined, interval=0.1,
               message=lambda: "; ".join(f"{n.addr}: {cluster_info(n)}" for n in nodes))


def test_file_then_environment_then_arguments(start, tmp_path):
    conf = tmp_path / "disque.conf"
    conf.write_text("loglevel warning\nmaxmemory 100mb\nappendfsync no\n")
    n = start({"DISQUETTE_LOGLEVEL": "verbose", "DISQUETTE_MAXMEMORY": "200mb",
               "DISQUETTE_BIND": "127.0.0.1  127.0.0.2"},
              args=[str(conf), "--maxmemory", "300mb"])
    assert config_get(n, "appendfsync") == "no"         # the file alone
    assert config_get(n, "loglevel") == "verbose"       # the environment over the file
    assert config_get(n, "maxmemory") == str(300 << 20)  # arguments over both
    # bind takes several addresses from one variable; the node listens on each.
    assert config_get(n, "bind") == "127.0.0.1 127.0.0.2"
    with RawConn("127.0.0.2", n.port) as r:
        assert r.call("PING") == b"+PONG\r\n"


def test_config_file_from_the_environment_and_a_password(start, tmp_path):
    conf = tmp_path / "node.conf"
    conf.write_text("appendonly yes\n")
    n = start({"DISQUETTE_CONFIG": str(conf), "DISQUETTE_REQUIREPASS": "s3cret word"})
    with RawConn(n.host, n.port) as r:
        assert r.call("PING").startswith(b"-NOAUTH")
        assert r.call("AUTH", "s3cret word") == b"+OK\r\n"
        assert r.call("CONFIG", "GET", "appendonly") == b"*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"


def test_empty_variables_pass_nothing(start):
    # The image sets DISQUETTE_SEEDS and the announce variables to "": the
    # defaults apply (an empty announce address means "the one peers see").
    n = start({"DISQUETTE_ANNOUNCE_PORT": "", "DISQUETTE_LOGLEVEL": ""})
    assert config_get(n, "cluster-announce-port") == "0"
    assert config_get(n, "loglevel") == "notice"


def test_a_command_runs_instead_of_the_server():
    env = {"PATH": str(VENV_BIN) + ":/usr/bin:/bin"}
    res = run(["sh", str(ENTRYPOINT), "disquette-server", "--version"], env=env)
    assert res.returncode == 0 and res.stdout.startswith("Disquette server v="), res
    res = run(["sh", str(ENTRYPOINT), "disquette-check-aof", "/nonexistent.aof"], env=env)
    assert res.returncode != 0 and "nonexistent.aof" in res.stdout + res.stderr


def test_a_bad_option_stops_the_node_with_the_servers_message(start):
    n = start({"DISQUETTE_APPENDONLY": "maybe"}, wait=False)
    with pytest.raises(Exception) as err:
        n.start()
    assert "--appendonly" in str(err.value) and "maybe" in str(err.value)


def test_security_variables_and_the_probes_over_tls(start, tmp_path):
    ca = CA(tmp_path / "pki")
    cert = ca.issue("node")
    tls_port = free_port()
    tls_env = {"DISQUETTE_TLS_CERT_FILE": str(cert.cert), "DISQUETTE_TLS_KEY_FILE": str(cert.key),
               "DISQUETTE_TLS_CA_CERT_FILE": str(ca.cert_file)}
    n = start({**tls_env, "DISQUETTE_TLS_PORT": str(tls_port), "DISQUETTE_TLS_CLUSTER": "yes",
               "DISQUETTE_TLS_AUTH_CLIENTS": "optional", "DISQUETTE_CLUSTER_AUTH_PASS": "bus pw"})
    config = n.client().config_get("*")
    assert (config["tls-port"], config["tls-cluster"], config["tls-auth-clients"],
            config["cluster-auth-pass"]) == (str(tls_port), "yes", "optional", "bus pw")
    # The image turns protected-mode off (it listens on every interface by design).
    assert config["protected-mode"] == "no"
    assert tls_call(tls_port, client_context(None, None, ca=ca), "PING") == b"+PONG\r\n"
    # The probes and hooks speak TLS when plaintext is off (DISQUETTE_PORT=0),
    # with the node's own certificate.
    env = {**tls_env, "DISQUETTE_TLS_PORT": str(tls_port)}
    for verb in ("ready", "alive", "drain", "rejoin"):
        res = ctl(verb, port=0, env=env)
        assert res.returncode == 0, (verb, res.stdout, res.stderr)
    assert ctl("ready", port=0, env={**env, "DISQUETTE_TLS_PORT": str(n.port)}).returncode == 1
    assert ctl("ready", port=0, env={}).returncode == 2
