"""broker.config: disque.conf parsing, command-line overrides, CONFIG GET/SET/REWRITE."""

import os
import typing

import pytest
from hypothesis import given, strategies as st

from broker import node
from broker.config import (
    DIRECTIVES,
    REWRITE_SIGNATURE,
    Config,
    ConfigError,
    OutputBufferLimit,
    format_memory,
    parse_memory,
    quote_arg,
    split_args,
    stringmatch,
)
from protocol.resp import Error
from server.main import read_config_file
from server.sim.inprocess import InProcessNode

KB, MB, GB = 1024, 1024**2, 1024**3

# Shaped like the disque.conf shipped with Disque: banner comments, commented
# out examples, quoted values, odd spacing and case.
DISQUE_CONF = """\
# Disque configuration file example
#
# Note on units: when memory size is needed, it is possible to specify
# it in the usual form of 1k 5GB 4M and so forth.

################################## INCLUDES ###################################
# include /path/to/local.conf

################################ GENERAL  #####################################
daemonize no
# pidfile /var/run/disque.pid
port 7712
tcp-backlog 511
bind 127.0.0.1 ::1
# unixsocket /tmp/disque.sock
# unixsocketperm 700
timeout 0
tcp-keepalive 60
LogLevel VERBOSE
logfile ""
syslog-ident "disque node"
dir ./data

################################## SECURITY ###################################
requirepass 'se cret\\'s'

################################### LIMITS ####################################
maxclients 5000
maxmemory 2GB

############################## APPEND ONLY MODE ###############################
appendonly yes
appendfilename "jobs.aof"
appendfsync always
no-appendfsync-on-rewrite no
auto-aof-rewrite-percentage 50
auto-aof-rewrite-min-size 32mb
aof-load-truncated yes
aof-enqueue-jobs-once no

################################ DISQUE CLUSTER ###############################
cluster-config-file "nodes-7712.conf"
cluster-node-timeout 5000

################################## SLOW LOG ###################################
slowlog-log-slower-than 10000
slowlog-max-len 128

################################ LATENCY MONITOR ##############################
latency-monitor-threshold 0

############################### ADVANCED CONFIG ###############################
client-output-buffer-limit normal 0 0 0
client-output-buffer-limit pubsub 64mb 16mb 90
hz 10
aof-rewrite-incremental-fsync yes
"""


def load(text: str) -> Config:
    config = Config()
    config.load_text(text)
    return config


def load_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value


def set_error(name: str, value: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Config().set(name, value)
    return info.value


# -- the table ---------------------------------------------------------------


def test_every_directive_is_a_typed_attribute():
    # The table is made from Config's typed fields (one declaration each), so
    # what type checkers and readers see is what drives parsing; a default
    # must be of its field's type.
    hints = typing.get_type_hints(Config)
    for d in DIRECTIVES.values():
        assert d.attr in hints, d.name
        assert isinstance(d.default, typing.get_origin(hints[d.attr]) or hints[d.attr]), d.name
    assert set(hints) - {d.attr for d in DIRECTIVES.values()} == {"config_file",
                                                                  "rename_commands"}


def test_defaults_are_disques():
    c = Config()
    assert c.port == 7711
    assert c.bind == ["127.0.0.1"]
    assert c.maxmemory == 1 * GB
    assert c.appendonly is False
    assert c.appendfilename == "disque.aof"
    assert c.appendfsync == "everysec"
    assert c.auto_aof_rewrite_percentage == 100
    assert c.auto_aof_rewrite_min_size == 64 * MB
    assert c.aof_load_truncated is True
    assert c.aof_enqueue_jobs_once is False
    assert c.cluster_config_file == "nodes.conf"
    assert c.cluster_node_timeout == 15000
    assert c.maxclients == 10000
    assert c.loglevel == "notice"
    assert c.logfile == ""
    assert c.dir == "."
    assert c.hz == 10
    assert (c.timeout, c.tcp_keepalive, c.tcp_backlog) == (0, 0, 511)
    assert c.requirepass == ""
    assert c.proto_max_bulk_len == 512 * MB
    assert c.client_query_buffer_limit == 1 * GB
    assert (c.cluster_bus_port, c.cluster_announce_ip,
            c.cluster_announce_port, c.cluster_announce_bus_port) == (0, "", 0, 0)
    assert c.config_file is None


def test_instances_do_not_share_mutable_values():
    a, b = Config(), Config()
    a.bind.append("::1")
    a.set("client-output-buffer-limit", "normal 1mb 1mb 1")
    assert b.bind == ["127.0.0.1"]
    assert b.client_output_buffer_limit["normal"] == OutputBufferLimit(0, 0, 0)
    assert DIRECTIVES["bind"].default == ["127.0.0.1"]


def test_keyword_overrides_and_copy():
    c = Config(port=7800, appendonly=True)
    assert (c.port, c.appendonly) == (7800, True)
    d = c.copy()
    d.bind.append("::1")
    assert d == Config(port=7800, appendonly=True, bind=["127.0.0.1", "::1"])
    assert c.bind == ["127.0.0.1"]
    with pytest.raises(TypeError):
        Config(no_such_thing=1)


def test_bus_port_follows_port_unless_set():
    assert Config(port=7711).effective_bus_port == 17711
    assert Config(port=7711, cluster_bus_port=9000).effective_bus_port == 9000


# -- loading disque.conf -----------------------------------------------------


def test_realistic_disque_conf():
    c = load(DISQUE_CONF)
    assert c.port == 7712
    assert c.bind == ["127.0.0.1", "::1"]
    assert c.tcp_keepalive == 60
    assert c.loglevel == "verbose"  # directive and enum are case-insensitive
    assert c.logfile == ""
    assert c.syslog_ident == "disque node"
    assert c.dir == "./data"
    assert c.requirepass == "se cret's"
    assert c.maxclients == 5000
    assert c.maxmemory == 2 * GB
    assert c.appendonly is True
    assert c.appendfilename == "jobs.aof"
    assert c.appendfsync == "always"
    assert c.auto_aof_rewrite_percentage == 50
    assert c.auto_aof_rewrite_min_size == 32 * MB
    assert c.cluster_config_file == "nodes-7712.conf"
    assert c.cluster_node_timeout == 5000
    limits = c.client_output_buffer_limit
    assert limits["pubsub"] == OutputBufferLimit(64 * MB, 16 * MB, 90)
    assert limits["slave"] == OutputBufferLimit(256 * MB, 64 * MB, 60)  # untouched
    # Not in the file: default.
    assert c.pidfile == "" and c.unixsocket == ""


def test_later_lines_win_and_blank_or_crlf_lines_are_fine():
    c = load("port 1\r\n\r\n   \n\tport 2\r\n")
    assert c.port == 2


@pytest.mark.parametrize("text, lineno, reason", [
    ("port 7711\n\nfoo bar\n", 3, "Bad directive or wrong number of arguments"),
    ("port\n", 1, "Bad directive or wrong number of arguments"),
    ("port 1 2\n", 1, "Bad directive or wrong number of arguments"),
    ("port 7711 # trailing comments are not comments\n", 1,
     "Bad directive or wrong number of arguments"),
    ("bind\n", 1, "Bad directive or wrong number of arguments"),
    ("#ok\nrequirepass \"unterminated\n", 2, "Unbalanced quotes in configuration line"),
    ("port 70000\n", 1, "Invalid port"),
    ("appendonly maybe\n", 1, "argument must be 'yes' or 'no'"),
    ("maxmemory lots\n", 1, "argument must be a memory value"),
    ("maxmemory 0\n", 1, "maxmemory must be a memory value greater than 0"),
    ("loglevel loud\n", 1, "Invalid log level. Must be one of debug, verbose, notice, warning"),
    ("appendfsync sometimes\n", 1, "argument must be 'no', 'always' or 'everysec'"),
    ("appendfilename dir/x.aof\n", 1, "appendfilename can't be a path, just a filename"),
    ("cluster-node-timeout 0\n", 1, "cluster node timeout must be 1 or greater"),
    ("client-output-buffer-limit normal 0 0\n", 1,
     "Wrong number of arguments in buffer limit configuration."),
    ("client-output-buffer-limit vip 0 0 0\n", 1,
     "Invalid client class specified in buffer limit configuration."),
    ("include other.conf\n", 1, "include is not supported when loading configuration text"),
])
def test_load_errors_name_the_line(text, lineno, reason):
    e = load_error(text)
    assert e.lineno == lineno
    assert e.reason.startswith(reason)
    bad_line = text.splitlines()[lineno - 1].strip()
    assert e.line == bad_line
    # The message an operator sees, in redis-server's shape.
    assert str(e) == ("*** FATAL CONFIG FILE ERROR ***\n"
                      f"Reading the configuration file, at line {lineno}\n"
                      f">>> '{bad_line}'\n{e.reason}")


def test_load_file_follows_includes_and_records_absolute_path(tmp_path):
    (tmp_path / "extra.conf").write_text("maxclients 42\n")
    (tmp_path / "disque.conf").write_text("port 7720\ninclude extra.conf\n")
    c = Config()
    c.load_file("disque.conf", cwd=str(tmp_path), read=read_config_file)
    assert (c.port, c.maxclients) == (7720, 42)
    assert c.config_file == str(tmp_path / "disque.conf")


# -- command line ------------------------------------------------------------


def test_argv_overrides_win_over_the_file(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "disque.conf").write_text(
        "port 7711\nappendonly no\nmaxmemory 1gb\nbind 0.0.0.0\n")
    c = Config.from_argv(
        ["conf/disque.conf", "--port", "7712", "--bind", "127.0.0.1", "::1",
         "--APPENDONLY", "yes", "--requirepass", "", "--logfile", "my log.txt"],
        cwd=str(tmp_path), read=read_config_file)
    assert c.port == 7712
    assert c.bind == ["127.0.0.1", "::1"]
    assert c.appendonly is True
    assert c.maxmemory == GB  # from the file, not overridden
    assert c.requirepass == ""
    assert c.logfile == "my log.txt"
    assert c.config_file == str(tmp_path / "conf" / "disque.conf")
    assert os.path.isabs(c.config_file)


def test_argv_without_a_file():
    c = Config.from_argv(["--port", "7799", "--cluster-node-timeout", "3000"], cwd="/",
                         read=read_config_file)
    assert (c.port, c.cluster_node_timeout, c.config_file) == (7799, 3000, None)
    assert Config.from_argv([], cwd="/", read=read_config_file) == Config()


def test_argv_errors(tmp_path):
    with pytest.raises(ConfigError, match="can't open config file"):
        Config.from_argv(["missing.conf"], cwd=str(tmp_path), read=read_config_file)
    with pytest.raises(ConfigError, match="Bad directive") as info:
        Config.from_argv(["--nope", "1"], cwd=str(tmp_path), read=read_config_file)
    assert "--nope" in str(info.value)
    with pytest.raises(ConfigError, match="Invalid port"):
        Config.from_argv(["--port", "x"], cwd=str(tmp_path), read=read_config_file)
    with pytest.raises(ConfigError, match="wrong number of arguments"):
        Config.from_argv(["--port"], cwd=str(tmp_path), read=read_config_file)
    with pytest.raises(ConfigError, match="Unexpected argument"):
        Config.from_argv(["--", "x"], cwd=str(tmp_path), read=read_config_file)
    with pytest.raises(ConfigError, match="standard input"):
        Config.from_argv(["-"], cwd=str(tmp_path), read=read_config_file)


# -- memory units ------------------------------------------------------------


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("123", 123), ("5b", 5), ("5B", 5),
    ("1k", 1000), ("1K", 1000), ("1kb", 1024), ("1Kb", 1024),
    ("2m", 2_000_000), ("2mb", 2 * MB), ("2MB", 2 * MB),
    ("3g", 3_000_000_000), ("3gb", 3 * GB), ("3Gb", 3 * GB),
])
def test_parse_memory(text, value):
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "gb", "1.5gb", "-1", "1 gb", " 1", "1tb", "1_000", "0x10",
                                  "١٢"])
def test_parse_memory_rejects(text):
    with pytest.raises(ValueError):
        parse_memory(text)


@pytest.mark.parametrize("n, text", [
    (0, "0"), (100, "100"), (1000, "1000"), (KB, "1kb"), (3 * MB, "3mb"),
    (GB, "1gb"), (GB + KB, "1048577kb"), (GB + 1, "1073741825"),
])
def test_format_memory(n, text):
    assert format_memory(n) == text
    assert parse_memory(text) == n


# -- CONFIG SET ----------------------------------------------------------------


def test_set_converts_values():
    c = Config()
    c.set("maxmemory", "100mb")
    c.set("APPENDONLY", "Yes")
    c.set("loglevel", "WARNING")
    c.set("cluster-node-timeout", "2000")
    c.set("requirepass", "has space")
    c.set("slowlog-log-slower-than", "-1")
    c.set("dir", "/var/lib/disque")
    assert c.maxmemory == 100 * MB
    assert c.appendonly is True
    assert c.loglevel == "warning"
    assert c.cluster_node_timeout == 2000
    assert c.requirepass == "has space"
    assert c.slowlog_log_slower_than == -1
    assert c.dir == "/var/lib/disque"


def test_set_client_output_buffer_limit_changes_only_named_classes():
    c = Config()
    c.set("client-output-buffer-limit", "normal 1mb 512kb 30 pubsub 0 0 0")
    assert c.client_output_buffer_limit == {
        "normal": OutputBufferLimit(MB, 512 * KB, 30),
        "slave": OutputBufferLimit(256 * MB, 64 * MB, 60),
        "pubsub": OutputBufferLimit(0, 0, 0),
    }
    assert c.render("client-output-buffer-limit") == (
        f"normal {MB} {512 * KB} 30 slave {256 * MB} {64 * MB} 60 pubsub 0 0 0")


def test_hz_is_clamped_like_redis():
    c = Config()
    c.set("hz", "0")
    assert c.hz == 1
    c.set("hz", "100000")
    assert c.hz == 500
    with pytest.raises(ConfigError):
        c.set("hz", "-5")


def test_set_refuses_bad_values_with_the_redis_message():
    e = set_error("maxmemory", "foo")
    assert str(e).startswith("Invalid argument 'foo' for CONFIG SET 'maxmemory'")
    assert "memory value" in str(e)
    assert str(set_error("appendonly", "1")).startswith(
        "Invalid argument '1' for CONFIG SET 'appendonly'")
    assert "'yes' or 'no'" in str(set_error("appendonly", "1"))
    set_error("maxclients", "0")
    set_error("timeout", "-1")
    set_error("requirepass", "x" * 513)
    set_error("proto-max-bulk-len", "1kb")  # Redis' floor is 1mb
    set_error("client-query-buffer-limit", "10")
    set_error("cluster-announce-port", "65536")
    set_error("maxmemory", "-1gb")


def test_set_unknown_and_read_only_directives():
    assert str(set_error("xyz", "1")) == "Unsupported CONFIG parameter: xyz"
    for name in ("port", "bind", "daemonize", "pidfile", "cluster-config-file",
                 "cluster-bus-port", "appendfilename", "logfile", "unixsocket"):
        e = set_error(name, "1")
        assert str(e).startswith(f"Unsupported CONFIG parameter: {name}")
        assert "run time" in str(e)
    c = Config()
    c.set("port", "7000", at_runtime=False)
    c.set("bind", "0.0.0.0 ::", at_runtime=False)
    assert (c.port, c.bind) == (7000, ["0.0.0.0", "::"])


def test_failed_set_changes_nothing():
    c = Config()
    with pytest.raises(ConfigError):
        c.set("client-output-buffer-limit", "normal 1mb 1mb 1 vip 0 0 0")
    assert c == Config()


def test_set_tells_each_change_which_may_refuse_it():
    c = Config()
    seen = []

    def no_small_timeouts(name):
        seen.append((name, c.cluster_node_timeout))
        if name == "cluster-node-timeout" and c.cluster_node_timeout < 100:
            raise ConfigError("too small")

    c.set("LogLevel", "debug", changed=no_small_timeouts)        # told the table's name
    c.set("cluster-node-timeout", "500", changed=no_small_timeouts)
    with pytest.raises(ConfigError, match="too small"):
        c.set("cluster-node-timeout", "50", changed=no_small_timeouts)
    assert c.cluster_node_timeout == 500         # the refused value was undone
    with pytest.raises(ConfigError):
        c.set("maxmemory", "bad", changed=no_small_timeouts)
    c.set("hz", "20")                            # no one told
    assert seen == [("loglevel", 15000), ("cluster-node-timeout", 500),
                    ("cluster-node-timeout", 50)]


# -- CONFIG GET ----------------------------------------------------------------


def test_get_star_lists_everything_in_table_order():
    pairs = Config().get("*")
    assert [name for name, _ in pairs] == list(DIRECTIVES)
    values = dict(pairs)
    assert values["port"] == "7711"
    assert values["maxmemory"] == str(GB)
    assert values["appendonly"] == "no"
    assert values["aof-load-truncated"] == "yes"
    assert values["bind"] == "127.0.0.1"
    assert values["logfile"] == ""
    assert values["unixsocketperm"] == "0"


def test_get_patterns():
    c = Config(bind=["127.0.0.1", "::1"], unixsocketperm=0o700)
    assert c.get("max*") == [("maxclients", "10000"), ("maxmemory", str(GB)),
                             ("maxmemory-policy", "noeviction")]
    assert c.get("port") == [("port", "7711")]
    assert c.get("PORT") == [("port", "7711")]  # case-insensitive like Redis
    assert c.get("bind") == [("bind", "127.0.0.1 ::1")]
    assert c.get("unixsocketperm") == [("unixsocketperm", "700")]
    assert c.get("nope") == []
    assert c.get("por?") == [("port", "7711")]
    assert [n for n, _ in c.get("*aof*")] == [
        "auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size", "aof-load-truncated",
        "aof-enqueue-jobs-once", "aof-history", "aof-rewrite-incremental-fsync"]
    assert [n for n, _ in c.get("[pt]*")] == [
        "pidfile", "port", "tcp-backlog", "timeout", "tcp-keepalive", "protected-mode",
        "tls-port", "tls-cert-file", "tls-key-file", "tls-key-file-pass",
        "tls-ca-cert-file", "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols",
        "tls-ciphers", "tls-ciphersuites", "tls-cluster", "proto-max-bulk-len"]
    assert [n for n, _ in c.get("cluster-announce-*port")] == [
        "cluster-announce-port", "cluster-announce-bus-port"]
    assert c.render("MaxMemory") == str(GB)
    with pytest.raises(ConfigError, match="Unsupported CONFIG parameter: nope"):
        c.render("nope")


@pytest.mark.parametrize("pattern, string, result", [
    ("*", "", True), ("a*b", "ab", True), ("a*b", "axxb", True), ("a*b", "axxc", False),
    ("a?c", "abc", True), ("a?c", "ac", False), ("[a-c]x", "bx", True),
    ("[c-a]x", "bx", True), ("[^a-c]x", "bx", False), ("[^a-c]x", "dx", True),
    ("a\\*", "a*", True), ("a\\*", "ab", False), ("[\\]]", "]", True),
    ("**a", "ba", True), ("ABC", "abc", True),
])
def test_stringmatch(pattern, string, result):
    assert stringmatch(pattern, string) is result


def test_stringmatch_does_not_backtrack_exponentially():
    # A hostile CONFIG GET pattern must not stall the node.
    assert stringmatch("*a" * 30 + "b", "a" * 200) is False


# -- quoting -----------------------------------------------------------------


def test_split_args_follows_sdssplitargs():
    assert split_args('set "a b\\x41\\n" \'c\\\'d\' e"f g" \'\' ""') == [
        "set", "a bA\n", "c'd", "ef g", "", ""]
    assert split_args("  \t ") == []
    for bad in ('"open', "'open", '"a"b', "'a'b"):
        with pytest.raises(ValueError):
            split_args(bad)


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_quote_arg_round_trips(s):
    assert split_args("x " + quote_arg(s)) == ["x", s]


# -- CONFIG REWRITE ------------------------------------------------------------


ORIGINAL = """\
# My node.
port 7711
  # indented comment stays

rename-command FLUSHALL ""
MAXMEMORY 1gb
appendonly no
maxmemory 3gb
bind 127.0.0.1
"""


def test_rewrite_keeps_comments_unknown_lines_and_order():
    c = load(DISQUE_CONF)
    new = c.rewrite(DISQUE_CONF)
    old_lines, new_lines = DISQUE_CONF.splitlines(), new.splitlines()
    # Nothing changed: comments, blanks and directives stay line for line;
    # only the spelling of values becomes canonical.
    assert len(new_lines) == len(old_lines)
    for old, line in zip(old_lines, new_lines):
        if not old or old.startswith("#"):
            assert line == old
    assert "loglevel verbose" in new_lines
    assert "maxmemory 2gb" in new_lines
    assert "requirepass \"se cret's\"" in new_lines
    assert REWRITE_SIGNATURE not in new
    assert load(new) == c


def test_rewrite_updates_values_drops_duplicates_and_appends_new_ones_once():
    c = Config()
    c.load_text(ORIGINAL.replace("rename-command FLUSHALL \"\"\n", ""))
    c.set("maxmemory", "2gb")
    c.set("appendonly", "yes")
    c.set("cluster-node-timeout", "5000")
    c.set("requirepass", 'pa"ss')
    c.set("bind", "127.0.0.1 ::1", at_runtime=False)
    new = c.rewrite(ORIGINAL)
    assert new == """\
# My node.
port 7711
  # indented comment stays

rename-command FLUSHALL ""
maxmemory 2gb
appendonly yes
bind 127.0.0.1 ::1
# Generated by CONFIG REWRITE
requirepass "pa\\"ss"
cluster-node-timeout 5000
"""
    # Idempotent: a second rewrite finds everything in place.
    assert c.rewrite(new) == new
    # And it reads back to the same values.
    back = Config()
    back.load_text(new.replace("rename-command FLUSHALL \"\"\n", ""))
    assert back == c


def test_rewrite_after_a_later_change_reuses_the_signature():
    c = Config()
    c.set("maxclients", "100")
    first = c.rewrite("port 7711\n")
    c.set("hz", "50")
    second = c.rewrite(first)
    assert second == ("port 7711\n" + REWRITE_SIGNATURE + "\n"
                      "maxclients 100\nhz 50\n")
    assert second.count(REWRITE_SIGNATURE) == 1


def test_rewrite_writes_nothing_for_defaults():
    assert Config().rewrite("") == ""
    assert Config().rewrite("# only a comment") == "# only a comment\n"
    # A directive at its default stays when it is in the file (the user wrote it).
    assert Config().rewrite("appendonly no\n") == "appendonly no\n"


def test_rewrite_client_output_buffer_limit_one_line_per_class():
    c = load("client-output-buffer-limit pubsub 32mb 8mb 60\n")
    c.set("client-output-buffer-limit", "normal 10mb 5mb 10")
    new = c.rewrite("client-output-buffer-limit pubsub 32mb 8mb 60\n")
    assert new == ("client-output-buffer-limit pubsub 32mb 8mb 60\n"
                   f"{REWRITE_SIGNATURE}\n"
                   "client-output-buffer-limit normal 10mb 5mb 10\n")
    assert c.rewrite(new) == new
    assert load(new) == c


def test_rewrite_keeps_memory_exact_and_strings_quoted():
    c = Config()
    c.set("maxmemory", "1000")  # not a multiple of 1kb: stays in bytes
    c.set("dir", "/srv/disque data")
    c.set("auto-aof-rewrite-min-size", "1536kb")
    new = c.rewrite("dir .\n")
    assert new == (
        'dir "/srv/disque data"\n'
        f"{REWRITE_SIGNATURE}\n"
        "maxmemory 1000\n"
        "auto-aof-rewrite-min-size 1536kb\n")
    assert load(new) == c


def test_rewrite_survives_lines_it_cannot_parse():
    text = 'requirepass "broken\nport 1\n'
    c = Config(port=2)
    assert c.rewrite(text) == 'requirepass "broken\nport 2\n'


# -- CONFIG SET's route: the node tells its cluster layer and its host ---------


def test_config_set_is_applied_by_the_cluster_and_the_host_which_may_refuse():
    class Host(node.Host):
        def __init__(self):
            self.told = []

        def config_changed(self, name):
            self.told.append((name, n.config.cluster_node_timeout, n.config.dir))
            if name == "dir" and n.config.dir == "nowhere":
                raise ConfigError("CONFIG SET failed (possibly related to argument 'dir') - "
                                  "No such file or directory")

    host = Host()
    n = InProcessNode(host=host)
    assert n.call("CONFIG", "SET", "cluster-node-timeout", 1234, "dir", "data") == "OK"
    assert n.cluster.m.node_timeout == 1234
    assert host.told == [("cluster-node-timeout", 1234, "data"), ("dir", 1234, "data")]
    host.told.clear()
    reply = n.call("CONFIG", "SET", "cluster-node-timeout", 99, "dir", "nowhere")
    assert isinstance(reply, Error) and reply == (
        "ERR CONFIG SET failed (possibly related to argument 'dir') - No such file or directory")
    # All or nothing: the timeout is put back, and the cluster and the host
    # that had applied it are told again.
    assert (n.config.cluster_node_timeout, n.config.dir) == (1234, "data")
    assert n.cluster.m.node_timeout == 1234
    assert host.told == [("cluster-node-timeout", 99, "nowhere"),
                         ("dir", 99, "nowhere"),
                         ("cluster-node-timeout", 1234, "data"), ("dir", 1234, "data")]
