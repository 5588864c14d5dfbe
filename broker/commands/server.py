"""Server commands: INFO, CONFIG, DEBUG, COMMAND, TIME, SHUTDOWN, SLOWLOG, MONITOR,
BGREWRITEAOF."""

from __future__ import annotations

import platform
import re
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from itertools import islice

from broker import job, lifecycle
from broker.commands.args import SYNTAX_ERROR, parse_int
from broker.commands.table import command
from broker.dispatch import F_ADMIN, F_LOADING, F_NOAUTH, FLAG_NAMES, CommandError
from broker.slowlog import entry_reply
from broker.commands.connection import VERSION
from broker.config import ConfigError, format_memory
from protocol import resp
from protocol.resp import OK, Error, Map, Status, Verbatim

# INFO compiled_core: whether the core runs compiled (the mypyc build's
# extension modules, .so), read from what was loaded, not declared.
COMPILED_CORE = "yes" if any(m.__file__.endswith(tuple(EXTENSION_SUFFIXES))
                             for m in (job, resp)) else "no"


@command("time", 1, F_LOADING, doc="TIME: [unix seconds, microseconds]")
def time_(node, client, argv):
    now = node.clock()
    return [b"%d" % (now // 1000), b"%d" % ((now % 1000) * 1000)]


# ----------------------------------------------------------------------- INFO
def _section_server(node, now):
    uptime = (now - node.start_time) // 1000
    return [
        ("disque_version", "1.0-rc1"),
        ("disquette_version", VERSION),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", "64" if sys.maxsize > 2**32 else "32"),
        ("multiplexing_api", node.host.multiplexing_api),
        ("resp_parser", node.host.resp_parser),
        ("compiled_core", COMPILED_CORE),
        ("python_version", platform.python_version()),
        ("process_id", node.host.pid),
        ("run_id", node.myself_id),
        ("tcp_port", node.config.port),
        ("uptime_in_seconds", uptime),
        ("uptime_in_days", uptime // 86400),
        ("hz", node.config.hz),
        ("config_file", node.config.config_file or ""),
    ]


def _section_clients(node, now):
    return [("connected_clients", len(node.clients)),
            ("blocked_clients", node.blocked_count)]


def _section_memory(node, now):
    used = node.used_memory()
    rss = node.host.rss()
    maxmem = node.config.maxmemory
    return [
        ("used_memory", used), ("used_memory_human", format_memory(used)),
        ("used_memory_rss", rss), ("used_memory_rss_human", format_memory(rss)),
        ("maxmemory", maxmem), ("maxmemory_human", format_memory(maxmem)),
        ("mem_warning_level", node.memory_level()),
    ]


def _section_jobs(node, now):
    return [("registered_jobs", node.job_count),
            # (ext) ADDJOB ... IDEMPOTENCY keys this node maps to a job id
            ("idempotency_keys", len(node.idempotency))]


def _section_queues(node, now):
    return [("registered_queues", len(node.queues))]


AOF_OFF_FIELDS = [("aof_enabled", 0), ("aof_state", "off"), ("aof_rewrite_in_progress", 0),
                  ("aof_rewrite_scheduled", 0), ("aof_last_rewrite_time_sec", -1),
                  ("aof_current_rewrite_time_sec", -1), ("aof_last_bgrewrite_status", "ok"),
                  ("aof_last_write_status", "ok")]


def _section_persistence(node, now):
    aof = node.host.aof_info()
    if aof is None:
        aof = AOF_OFF_FIELDS + [("aof_fsync_policy", node.config.appendfsync)]
    return [("loading", int(node.loading))] + aof


def _section_stats(node, now):
    return list(node.stats_now().items())


def _section_cpu(node, now):
    sys_t, user_t = node.host.cpu()
    return [("used_cpu_sys", f"{sys_t:.2f}"), ("used_cpu_user", f"{user_t:.2f}")]


def _section_commandstats(node, now):
    # the node counts nanoseconds (cheaper to keep on the hot path)
    return [(f"cmdstat_{name.decode()}",
             f"calls={st.calls},usec={st.ns // 1000},usec_per_call={st.ns / 1000 / st.calls:.2f}")
            for name, st in sorted(node.cmdstats().items())]


def _section_cluster(node, now):
    return [("cluster_enabled", int(node.cluster.enabled))]


INFO_SECTIONS = {
    "server": _section_server,
    "clients": _section_clients,
    "memory": _section_memory,
    "jobs": _section_jobs,
    "queues": _section_queues,
    "persistence": _section_persistence,
    "stats": _section_stats,
    "cpu": _section_cpu,
    "cluster": _section_cluster,
    "commandstats": _section_commandstats,
}
DEFAULT_SECTIONS = [s for s in INFO_SECTIONS if s != "commandstats"]


@command("info", -1, F_LOADING, doc="INFO [section ...]")
def info(node, client, argv):
    wanted = [a.decode("latin-1").lower() for a in argv[1:]]
    if not wanted or wanted == ["default"]:
        sections = DEFAULT_SECTIONS
    elif "all" in wanted or "everything" in wanted:
        sections = list(INFO_SECTIONS)
    else:
        sections = [s for s in wanted if s in INFO_SECTIONS]
    now = node.clock()
    out = []
    for name in sections:
        if out:
            out.append("")
        out.append("# " + name.capitalize())
        out.extend(f"{k}:{v}" for k, v in INFO_SECTIONS[name](node, now))
    # A bulk string under RESP2, verbatim text ("=", "txt:") under RESP3 as Redis 7.
    if not out:  # only unknown sections: an empty string, as Redis
        return Verbatim("")
    return Verbatim("\r\n".join(out) + "\r\n")


# --------------------------------------------------------------------- CONFIG
@command("config", -2, F_ADMIN | F_LOADING,
         doc="CONFIG GET pattern | SET directive value | REWRITE | RESETSTAT")
def config(node, client, argv):
    sub = argv[1].lower()
    cfg = node.config
    n = len(argv)
    arity = {b"get": 3, b"rewrite": 2, b"resetstat": 2}.get(sub)
    # (several directive/value pairs in one SET are an extension)
    if (arity and n != arity) or (sub == b"set" and (n < 4 or n % 2)):
        raise CommandError(f"ERR Wrong number of arguments for CONFIG "
                           f"{argv[1].decode('latin-1')}")
    if sub == b"get" and len(argv) == 3:
        pairs = cfg.get(argv[2].decode("latin-1"))
        out = []
        for k, v in pairs:
            out += [k.encode(), v.encode()]
        # Redis 7 answers a map under RESP3; flat under RESP2.
        return Map(zip(out[::2], out[1::2])) if client.proto == 3 else out
    if sub == b"set" and len(argv) >= 4 and len(argv) % 2 == 0:
        try:
            # The cluster layer and the host apply each change (or refuse it).
            cfg.set_many([(argv[i].decode("latin-1"),     # errors quote it as given
                           argv[i + 1].decode("latin-1")) for i in range(2, len(argv), 2)],
                         changed=node.config_changed)
        except ConfigError as e:
            msg = str(e)
            return Error(msg if msg.startswith("ERR") else "ERR " + msg)
        finally:
            node.config_applied()
        return OK
    if sub == b"rewrite" and len(argv) == 2:
        if not cfg.config_file:
            return Error("ERR The server is running without a config file")
        try:
            node.host.rewrite_config()
        except OSError as e:
            return Error(f"ERR Rewriting config file: {e.strerror or e}")
        return OK
    if sub == b"resetstat" and len(argv) == 2:
        node.reset_stats()
        return OK
    raise CommandError("ERR CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


# ---------------------------------------------------------------------- DEBUG
_LEADING_FLOAT = re.compile(rb"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@command("debug", -2, F_ADMIN | F_LOADING,
         doc="DEBUG FLUSHALL | SLEEP seconds | ERROR text | LOADAOF | SEGFAULT | RESTART")
def debug(node, client, argv):
    sub = argv[1].lower()
    if sub == b"flushall":
        lifecycle.flush_all(node)
        return OK
    if sub == b"sleep" and len(argv) == 3:
        # strtod as Disque calls it: the leading number, 0 if there is none.
        m = _LEADING_FLOAT.match(argv[2])
        node.host.sleep(max(float(m.group()), 0.0) if m else 0.0)
        return OK
    if sub == b"loadaof":
        node.host.debug_loadaof()
        return OK
    if sub == b"error" and len(argv) == 3:
        return Error(argv[2].decode("utf-8", "replace"))    # the text as an error reply
    if sub == b"segfault":
        node.host.crash()
        return OK
    if sub == b"restart":
        node.host.restart()
        return OK
    raise CommandError(f"ERR Unknown DEBUG subcommand or wrong number of arguments for "
                       f"'{argv[1].decode('latin-1')}'")


# --------------------------------------------------------------------- COMMAND
def _command_info(name: bytes, cmd) -> list:
    flags = [Status(n.decode()) for f, n in FLAG_NAMES.items() if cmd.flags & f]
    return [name, cmd.arity, flags, 0, 0, 0, [], [], [], []]


@command("command", -1, F_LOADING,
         doc="COMMAND | COMMAND COUNT | COMMAND INFO name ... | COMMAND DOCS [name ...]")
def command_cmd(node, client, argv):
    table = node.commands       # this node's names (rename-command applied)
    if len(argv) == 1:
        return [_command_info(n, c) for n, c in table.items()]
    sub = argv[1].lower()
    if sub == b"count" and len(argv) == 2:
        return len(table)
    if sub == b"info":
        names = argv[2:] or list(table)
        return [_command_info(n.lower(), table[n.lower()]) if n.lower() in table else None
                for n in names]
    if sub == b"docs":
        names = [n.lower() for n in argv[2:]] or list(table)
        docs = {}
        for n in names:
            cmd = table.get(n)
            if cmd is not None:
                syntax = cmd.doc.splitlines()[0] if cmd.doc else n.decode().upper()
                docs[n] = Map({b"summary": syntax.encode(), b"since": b"1.0.0",
                               b"group": b"generic"})
        return Map(docs)
    if sub == b"list":
        return list(table)
    raise CommandError(f"ERR unknown subcommand '{argv[1].decode('latin-1')}'. "
                       "Try COMMAND HELP.")


# -------------------------------------------------------------------- SHUTDOWN
@command("shutdown", -1, F_ADMIN | F_LOADING, doc="SHUTDOWN [NOSAVE|SAVE|REWRITE-AOF]")
def shutdown(node, client, argv):
    mode = "default"
    for a in argv[1:]:
        a = a.lower()
        if a in (b"nosave", b"save", b"rewrite-aof", b"now", b"force", b"abort"):
            mode = a.decode()
        else:
            raise CommandError(SYNTAX_ERROR)
    node.host.shutdown(mode)
    # On success the connection just closes, as in Redis.
    client.closing = True
    return None


@command("bgrewriteaof", 1, F_ADMIN, doc="BGREWRITEAOF")
def bgrewriteaof(node, client, argv):
    return Status(node.host.bgrewriteaof())


@command("monitor", 1, F_ADMIN, doc="MONITOR: stream every command this node receives.")
def monitor(node, client, argv):
    if not client.monitor:
        client.monitor = True
        node.monitors.append(client)
    return OK


@command("slowlog", -2, F_ADMIN, doc="SLOWLOG GET [count] | LEN | RESET")
def slowlog(node, client, argv):
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"get" and n in (2, 3):
        count = parse_int(argv[2]) if n == 3 else 10
        entries = node.slowlog if count < 0 else islice(node.slowlog, count)
        return [entry_reply(e) for e in entries]
    if sub == b"len" and n == 2:
        return len(node.slowlog)
    if sub == b"reset" and n == 2:
        node.slowlog.clear()
        return OK
    raise CommandError("ERR Unknown SLOWLOG subcommand or wrong # of args. Try GET, RESET, LEN.")


@command("latency", -2, F_ADMIN | F_LOADING,
         doc="LATENCY LATEST | HISTORY event | RESET [event ...] | GRAPH event | DOCTOR")
def latency(node, client, argv):
    """Disque's latency monitor (broker/latency.py), its replies and errors."""
    sub = argv[1].lower()
    n = len(argv)
    monitor = node.latency
    if sub == b"history" and n == 3:
        return monitor.history_reply(argv[2].decode("latin-1"))
    if sub == b"graph" and n == 3:
        event = argv[2].decode("latin-1")
        graph = monitor.graph(event, node.clock() // 1000)
        if graph is None:
            raise CommandError(f"ERR No samples available for event '{event}'")
        return graph.encode()
    if sub == b"latest" and n == 2:
        return monitor.latest_reply()
    if sub == b"doctor" and n == 2:
        cfg = node.config
        return monitor.doctor(node.clock() // 1000, cfg.latency_monitor_threshold,
                              cfg.slowlog_log_slower_than, cfg.appendfsync == "always",
                              cfg.hz).encode()
    if sub == b"reset":
        return monitor.reset([a.decode("latin-1") for a in argv[2:]] if n > 2 else None)
    raise CommandError(SYNTAX_ERROR)
