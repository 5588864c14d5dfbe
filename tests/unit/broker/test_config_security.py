"""The security and joining directives of broker/config.py (issue 13):
parsing, CONFIG SET rules, rename-command lines, and the derived values."""

from __future__ import annotations

import pytest

from broker.commands import COMMANDS, renamed
from broker.config import Config, ConfigError, RenameCommand, Seed


def test_defaults():
    c = Config()
    assert c.protected_mode is True
    assert (c.tls_port, c.tls_cluster, c.tls_auth_clients, c.tls_protocols) == (0, False, "yes", "")
    assert (c.cluster_seeds, c.cluster_auth_pass, c.cluster_auth_pass_previous) == ([], "", "")
    assert c.rename_commands == []
    assert c.cluster_secrets() == []


@pytest.mark.parametrize("text, seeds", [
    ("a:1", [Seed("a", 1)]),
    ("node-0.svc.cluster.local:7711, 10.0.0.2:7712", [
        Seed("node-0.svc.cluster.local", 7711), Seed("10.0.0.2", 7712)]),
    ("[::1]:7711@17000,b:2", [Seed("::1", 7711, 17000), Seed("b", 2)]),
    ("a:1 b:2", [Seed("a", 1), Seed("b", 2)]),
    ("", []),
])
def test_seeds_parse_and_render(text, seeds):
    c = Config()
    c.set("cluster-seeds", text)
    assert c.cluster_seeds == seeds
    c2 = Config()
    c2.set("cluster-seeds", c.render("cluster-seeds"))     # what CONFIG GET shows reads back
    assert c2.cluster_seeds == seeds


@pytest.mark.parametrize("text, error", [
    ("a", "invalid seed 'a': expected host:port"),
    ("a:0", "port out of range"), ("a:65536", "port out of range"),
    ("::1:7711", "invalid seed"), ("a:1@99999", "port out of range"),
])
def test_bad_seeds(text, error):
    with pytest.raises(ConfigError, match=error):
        Config().set("cluster-seeds", text)


def test_seeds_from_a_file_and_rewrite():
    c = Config()
    c.load_text("cluster-seeds disquette-0.h:7711,disquette-1.h:7711\n")
    assert [s.host for s in c.cluster_seeds] == ["disquette-0.h", "disquette-1.h"]
    assert 'cluster-seeds "disquette-0.h:7711,disquette-1.h:7711"' in c.rewrite("")
    assert "cluster-seeds" not in Config().rewrite("")      # the default is not pinned


def test_a_new_cluster_auth_pass_keeps_the_old_one_for_the_rotation():
    c = Config()
    c.set("cluster-auth-pass", "one")
    assert c.cluster_secrets() == ["one"] and c.cluster_auth_pass_previous == ""
    c.set("cluster-auth-pass", "two")
    assert c.cluster_secrets() == ["two", "one"]
    c.set("cluster-auth-pass", "two")                # the same again: nothing to keep
    assert c.cluster_auth_pass_previous == "one"
    c.set("cluster-auth-pass-previous", "")
    assert c.cluster_secrets() == ["two"]
    c.set("cluster-auth-pass", "")                    # off: no secret at all
    assert c.cluster_secrets() == [] and c.cluster_auth_pass_previous == ""


def test_a_refused_rotation_changes_nothing():
    c = Config(cluster_auth_pass="one")

    def refuse(name):
        raise ConfigError("no")

    with pytest.raises(ConfigError):
        c.set("cluster-auth-pass", "two", changed=refuse)
    assert (c.cluster_auth_pass, c.cluster_auth_pass_previous) == ("one", "")


def test_config_set_of_several_directives_is_all_or_nothing():
    c = Config()
    heard = []

    def watch(name):
        heard.append((name, c.tls_cert_file, c.tls_key_file))
        if c.tls_cert_file == "new.crt" and c.tls_key_file != "new.key":
            raise ConfigError("the key does not go with the certificate")

    # Together they are fine: each call already sees both new values.
    c.set_many([("tls-cert-file", "new.crt"), ("tls-key-file", "new.key")], changed=watch)
    assert heard == [("tls-cert-file", "new.crt", "new.key"),
                     ("tls-key-file", "new.crt", "new.key")]
    # One alone is refused; so is a bad value anywhere: everything is put back
    # and each name already told is told again.
    c.set_many([("tls-cert-file", "a.crt"), ("tls-key-file", "a.key")], changed=watch)
    heard.clear()
    with pytest.raises(ConfigError):
        c.set_many([("tls-key-file", "x.key"), ("tls-cert-file", "new.crt")], changed=watch)
    assert (c.tls_cert_file, c.tls_key_file) == ("a.crt", "a.key")
    assert heard[-1] == ("tls-key-file", "a.crt", "a.key")
    with pytest.raises(ConfigError, match="tls-protocols"):
        c.set_many([("tls-cert-file", "b.crt"), ("tls-protocols", "SSLv2")], changed=watch)
    assert c.tls_cert_file == "a.crt"


@pytest.mark.parametrize("value, ok", [
    ("TLSv1.2 TLSv1.3", True), ("tlsv1.3", True), ("TLSv1 TLSv1.1", True), ("", True),
    ("SSLv3", False), ("TLSv1.4", False), ("TLSv1.2,TLSv1.3", False)])
def test_tls_protocols(value, ok):
    c = Config()
    if ok:
        c.set("tls-protocols", value)
    else:
        with pytest.raises(ConfigError, match="Invalid tls-protocols specified"):
            c.set("tls-protocols", value)


def test_tls_enums_and_ports():
    c = Config()
    c.set("tls-auth-clients", "OPTIONAL")
    assert c.tls_auth_clients == "optional"
    with pytest.raises(ConfigError):
        c.set("tls-auth-clients", "maybe")
    with pytest.raises(ConfigError, match="Invalid port"):
        c.set("tls-port", "70000")
    with pytest.raises(ConfigError, match="not supported"):
        c.set("tls-ciphersuites", "TLS_AES_128_GCM_SHA256")


def test_port_zero_makes_the_tls_port_the_nodes_port():
    assert (Config(port=7711, tls_port=7712).client_port,
            Config(port=7711, tls_port=7712).effective_bus_port) == (7711, 17711)
    assert (Config(port=0, tls_port=7712).client_port,
            Config(port=0, tls_port=7712).effective_bus_port) == (7712, 17712)
    assert Config(port=0, tls_port=7712, cluster_bus_port=9000).effective_bus_port == 9000


def test_rename_command_lines_are_kept_apart():
    c = Config()
    c.load_text('rename-command CONFIG "cfg"\nrename-command debug ""\nport 7800\n')
    assert [(r.old, r.new, r.lineno) for r in c.rename_commands] == [
        ("CONFIG", "cfg", 1), ("debug", "", 2)]
    assert c.get("rename*") == []                          # not a CONFIG GET directive
    assert c.copy().rename_commands == c.rename_commands
    kept = c.rewrite('rename-command CONFIG "cfg"\nport 7711\n')
    assert kept.startswith('rename-command CONFIG "cfg"\nport 7800\n')
    with pytest.raises(ConfigError, match="wrong number of arguments"):
        Config().load_text("rename-command debug\n")


def test_renamed_command_table():
    line = RenameCommand
    table = renamed(COMMANDS, [line("CONFIG", "cfg", 1, "", None),
                               line("debug", "", 2, "", None)])
    assert b"cfg" in table and b"config" not in table and b"debug" not in table
    assert table[b"cfg"] is COMMANDS[b"config"]
    assert b"config" in COMMANDS                          # the shared table is untouched
    for bad, reason in ((line("nosuch", "x", 1, "", None), "No such command"),
                        (line("ping", "ADDJOB", 1, "", None), "already exists")):
        with pytest.raises(ValueError, match=reason) as err:
            renamed(COMMANDS, [bad])
        assert err.value.args[1] is bad
    error = Config().rename_error(line("nosuch", "x", 3, "rename-command nosuch x", None),
                                  "No such command in rename-command")
    assert "at line 3" in str(error) and ">>> 'rename-command nosuch x'" in str(error)


@pytest.mark.parametrize("text, routes", [
    ("", {}),
    ("10.0.0.2:17711=127.0.0.1:27002", {("10.0.0.2", 17711): ("127.0.0.1", 27002)}),
    ("a:1=b:2, [::1]:3=[::1]:4 c:5=d:6", {
        ("a", 1): ("b", 2), ("::1", 3): ("::1", 4), ("c", 5): ("d", 6)}),
])
def test_bus_routes_parse_and_render(text, routes):
    c = Config()
    c.set("cluster-bus-route", text)
    assert c.cluster_bus_route == routes
    c2 = Config()
    c2.set("cluster-bus-route", c.render("cluster-bus-route"))
    assert c2.cluster_bus_route == routes


@pytest.mark.parametrize("text, error", [
    ("a:1", "invalid route 'a:1'"), ("a:1=b", "invalid route"),
    ("a:0=b:2", "port out of range"), ("a:1=b:65536", "port out of range"),
])
def test_bad_bus_routes(text, error):
    with pytest.raises(ConfigError, match=error):
        Config().set("cluster-bus-route", text)


def test_bus_routes_from_a_file_and_rewrite():
    c = Config()
    c.load_text("cluster-bus-route a:1=b:2,c:3=d:4\n")
    assert c.cluster_bus_route == {("a", 1): ("b", 2), ("c", 3): ("d", 4)}
    assert 'cluster-bus-route "a:1=b:2,c:3=d:4"' in c.rewrite("")
    assert "cluster-bus-route" not in Config().rewrite("")
