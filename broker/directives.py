"""Every disque-server 1.0-rc1 directive (and this server's extensions),
declared once: a typed field of ``Directives`` that carries its Directive
(kind, default, settable at run time, doc).

``DIRECTIVES``, the table made from those fields, drives everything:
loading ``disque.conf`` text, command-line overrides, ``CONFIG GET/SET`` and
``CONFIG REWRITE`` (broker/config.py).  Adding a directive means adding one
field here; no other code needs to know about it.
"""

from __future__ import annotations

import copy
import os
from dataclasses import MISSING, dataclass, field, fields
from enum import StrEnum
from functools import partial
from typing import Any, Callable

from broker.config_kinds import (
    AddressList,
    Bool,
    Enum,
    Integer,
    Kind,
    Memory,
    Octal,
    OutputBufferLimit,
    OutputBufferLimits,
    RouteList,
    Seed,
    SeedList,
    String,
)

__all__ = ["AppendFsync", "Directive", "Directives", "DIRECTIVES", "DEFAULT_PIDFILE",
           "directive"]

# Written by the server when `daemonize yes` and no pidfile is configured (the
# Redis >= 3.2 rule: otherwise a pid file is written only when one is set).
DEFAULT_PIDFILE = "/var/run/disque.pid"

# Redis caps these; keeping the same caps means a config accepted here is
# accepted by the real thing and vice versa.
MAX_PASSWORD_LEN = 512
MIN_HZ, MAX_HZ = 1, 500


@dataclass(frozen=True)
class Directive:
    """One row of the table, made from its field of ``Directives``."""

    name: str
    kind: Kind
    default: Any
    runtime: bool  # may CONFIG SET change it while the node runs?
    doc: str

    @property
    def attr(self) -> str:
        """The attribute holding its value: the name with ``-`` spelled ``_``."""
        return self.name.replace("-", "_")


def directive(kind: Kind, default: Any, *, runtime: bool, doc: str) -> Any:
    """Declare a field of ``Directives`` as a directive named after the field
    (``_`` spelled ``-``).  A dataclass field, hence ``Any`` to type checkers
    (as ``field()``): the annotation gives the value's type."""
    about = {"kind": kind, "runtime": runtime, "doc": doc}
    if isinstance(default, (list, dict)):
        # A copy per Config: no two configs (or the table) share a list/dict.
        return field(default_factory=partial(copy.deepcopy, default), metadata=about)
    return field(default=default, metadata=about)


# --------------------------------------------------------------------------
# Checks of String values (a message for the user, None when fine).


def _not_empty(what: str) -> Callable[[str], str | None]:
    return lambda s: None if s else f"{what} can't be empty"


def _basename_only(s: str) -> str | None:
    # Redis refuses paths so the AOF always lives in `dir`, next to nodes.conf.
    if not s:
        return "appendfilename can't be empty"
    if os.path.basename(s) != s or s in (".", ".."):
        return "appendfilename can't be a path, just a filename"
    return None


def _password(s: str) -> str | None:
    if len(s) > MAX_PASSWORD_LEN:
        return f"Password is longer than {MAX_PASSWORD_LEN}"
    return None


# TLS protocol names as Redis' tls-protocols takes them (case-insensitive).
TLS_PROTOCOLS = ("tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3")


def _tls_protocols(s: str) -> str | None:
    if any(t.lower() not in TLS_PROTOCOLS for t in s.split()):
        return ("Invalid tls-protocols specified. "
                "Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.")
    return None


def _tls_ciphersuites(s: str) -> str | None:
    # Python's ssl module has no call for SSL_CTX_set_ciphersuites.
    if s:
        return ("tls-ciphersuites is not supported (Python's ssl module cannot choose "
                "TLSv1.3 cipher suites): leave it empty, or limit tls-protocols to "
                "TLSv1.2 and use tls-ciphers")
    return None


# --------------------------------------------------------------------------
# Values that are one of a few words, typed.


class AppendFsync(StrEnum):
    """appendfsync: when the AOF is fsynced. Compared as members; each is its
    word (CONFIG GET, INFO and CONFIG REWRITE show it as written)."""

    ALWAYS = "always"
    EVERYSEC = "everysec"
    NO = "no"


@dataclass(frozen=True)
class Members(Enum):
    """An Enum whose words are the members of ``members`` (a StrEnum), and
    whose value is the member."""

    members: type[StrEnum] = StrEnum

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(m.value for m in self.members))

    def parse(self, text: str, current: Any) -> StrEnum:
        return self.members(super().parse(text, current))


_PORT = Integer(0, 65535, message="Invalid port")
_MB = 1024**2
_GB = 1024**3


# --------------------------------------------------------------------------
# The directives.


@dataclass(kw_only=True, eq=False, repr=False)
class Directives:
    """The value of every directive, as a plain typed attribute (``-`` spelled
    ``_``); broker/config.py's Config is this plus loading and CONFIG SET.

    Field order is disque.conf order; CONFIG GET * and CONFIG REWRITE's
    appended lines follow it.
    """

    # -- general
    daemonize: bool = directive(
        Bool(), False, runtime=False,
        doc="Run in the background, detached from the terminal.")
    pidfile: str = directive(
        String(), "", runtime=False,
        doc="Where to write the pid. Empty: none, except with daemonize yes, which "
            "uses " + DEFAULT_PIDFILE + ".")
    port: int = directive(
        _PORT, 7711, runtime=False,
        doc="Client TCP port; 0 disables TCP. The cluster bus uses port + 10000 "
            "unless cluster-bus-port is set.")
    tcp_backlog: int = directive(
        Integer(0, message="Invalid backlog value"), 511, runtime=False,
        doc="listen() backlog.")
    bind: list[str] = directive(
        AddressList(), ["127.0.0.1"], runtime=False,
        doc="Addresses to listen on (up to 16). Loopback only by default, so a fresh "
            "node is not reachable from the network.")
    unixsocket: str = directive(
        String(), "", runtime=False,
        doc="Accepted for compatibility, ignored: no Unix socket is opened (clients connect over TCP).")
    unixsocketperm: int = directive(
        Octal(), 0, runtime=False,
        doc="Accepted for compatibility, ignored (see unixsocket).")
    timeout: int = directive(
        Integer(0, message="Invalid timeout value"), 0, runtime=True,
        doc="Close a client idle this many seconds; 0 never.")
    tcp_keepalive: int = directive(
        Integer(0, message="Invalid tcp-keepalive value"), 0, runtime=True,
        doc="Accepted for compatibility, ignored: client sockets get no SO_KEEPALIVE.")
    loglevel: str = directive(
        Enum(("debug", "verbose", "notice", "warning"),
             message="Invalid log level. Must be one of debug, verbose, notice, warning"),
        "notice", runtime=True,
        doc="Log verbosity.")
    logfile: str = directive(
        String(), "", runtime=False,
        doc="Log file, relative to dir; empty logs to standard output.")
    syslog_enabled: bool = directive(
        Bool(), False, runtime=False,
        doc="Accepted for compatibility, ignored: the log goes to logfile (or standard output) only.")
    syslog_ident: str = directive(
        String(), "disque", runtime=False,
        doc="Accepted for compatibility, ignored (see syslog-enabled).")
    syslog_facility: str = directive(
        Enum(("user", "local0", "local1", "local2", "local3",
              "local4", "local5", "local6", "local7"),
             message="Invalid log facility. Must be one of USER or between LOCAL0-LOCAL7"),
        "local0", runtime=False,
        doc="Accepted for compatibility, ignored (see syslog-enabled).")
    dir: str = directive(
        String(check=_not_empty("dir")), ".", runtime=True,
        doc="Working directory: AOF, cluster config file and log live here. A relative "
            "path is relative to where the server was started.")
    # -- security
    requirepass: str = directive(
        String(check=_password), "", runtime=True,
        doc="Password clients must AUTH with; empty for none.")
    protected_mode: bool = directive(
        Bool(), True, runtime=True,
        doc="With no requirepass, refuse clients that do not connect from the loopback "
            "interface (Redis' DENIED reply).")
    # TLS (Redis' names). Changing any of them at run time rebuilds the TLS
    # contexts and re-opens the TLS listeners; established connections stay.
    tls_port: int = directive(
        _PORT, 0, runtime=True,
        doc="Client TLS port; 0 disables TLS for clients (port 0 disables plaintext).")
    tls_cert_file: str = directive(
        String(), "", runtime=True,
        doc="Server certificate (PEM, chain allowed); also the node's client "
            "certificate on the cluster bus with tls-cluster.")
    tls_key_file: str = directive(
        String(), "", runtime=True,
        doc="Private key of tls-cert-file (PEM).")
    tls_key_file_pass: str = directive(
        String(), "", runtime=True,
        doc="Passphrase of an encrypted tls-key-file.")
    tls_ca_cert_file: str = directive(
        String(), "", runtime=True,
        doc="CA certificates (PEM) that client and peer certificates must chain to.")
    tls_ca_cert_dir: str = directive(
        String(), "", runtime=True,
        doc="Directory of CA certificates (c_rehash layout), as tls-ca-cert-file.")
    tls_auth_clients: str = directive(
        Enum(("yes", "no", "optional")), "yes", runtime=True,
        doc="Client certificates: required (yes), not asked (no), or checked when "
            "sent (optional).")
    tls_protocols: str = directive(
        String(check=_tls_protocols), "", runtime=True,
        doc="Space-separated TLS versions to accept; empty: TLSv1.2 TLSv1.3.")
    tls_ciphers: str = directive(
        String(), "", runtime=True,
        doc="OpenSSL cipher list for TLSv1.2 and below; empty: OpenSSL's default.")
    tls_ciphersuites: str = directive(
        String(check=_tls_ciphersuites), "", runtime=True,
        doc="TLSv1.3 cipher suites: only empty (OpenSSL's default) is supported.")
    tls_cluster: bool = directive(
        Bool(), False, runtime=True,
        doc="Mutual TLS on the cluster bus with the same files (every node must agree; "
            "changing it re-opens every bus link).")
    # -- limits
    maxclients: int = directive(
        Integer(1, message="Invalid max clients limit"), 10000, runtime=True,
        doc="Maximum simultaneous client connections.")
    maxmemory: int = directive(
        Memory(1, message="maxmemory must be a memory value greater than 0: "
                          "a memory limit is mandatory"),
        _GB, runtime=True,
        doc="Memory limit. Above 75% jobs are replicated externally, above 95% safe "
            "evictions start, over 100% ADDJOB gets -OOM. Mandatory, hence no 0.")
    maxmemory_policy: str = directive(
        Enum(("volatile-lru", "allkeys-lru", "volatile-random", "allkeys-random",
              "volatile-ttl", "noeviction")),
        "noeviction", runtime=True,
        doc="Accepted for redis.conf compatibility only: job eviction follows the "
            "fixed rules tied to maxmemory.")
    # -- append only file
    appendonly: bool = directive(
        Bool(), False, runtime=True,
        doc="Log job creations and evictions to the AOF and reload it at start.")
    appendfilename: str = directive(
        String(check=_basename_only), "disque.aof", runtime=False,
        doc="AOF file name, inside dir.")
    appendfsync: AppendFsync = directive(
        Members(message="argument must be 'no', 'always' or 'everysec'", members=AppendFsync),
        AppendFsync.EVERYSEC, runtime=True,
        doc="When the AOF is fsync'ed.")
    no_appendfsync_on_rewrite: bool = directive(
        Bool(), False, runtime=True,
        doc="Skip fsync while a rewrite is in progress.")
    auto_aof_rewrite_percentage: int = directive(
        Integer(0, message="Invalid negative percentage for AOF auto rewrite"), 100, runtime=True,
        doc="Rewrite when the AOF grew by this percentage since the last rewrite; 0 disables.")
    auto_aof_rewrite_min_size: int = directive(
        Memory(), 64 * _MB, runtime=True,
        doc="No automatic rewrite below this AOF size.")
    aof_load_truncated: bool = directive(
        Bool(), True, runtime=True,
        doc="Load an AOF whose last record is torn (with a warning) instead of refusing to start.")
    aof_enqueue_jobs_once: bool = directive(
        Bool(), False, runtime=True,
        doc="At the next AOF load put jobs straight back into their queues, then reset "
            "to no (controlled restarts).")
    aof_history: bool = directive(
        Bool(), False, runtime=True,
        doc="(ext) Also log the job history to the AOF: a time mark per write, every "
            "delivery, NACK and requeue, and expirations told from deletions (read by "
            "the disquette-aof Spark data source).")
    aof_rewrite_incremental_fsync: bool = directive(
        Bool(), True, runtime=True,
        doc="fsync every 32 MB while rewriting the AOF.")
    # -- cluster
    cluster_config_file: str = directive(
        String(check=_not_empty("cluster-config-file")), "nodes.conf", runtime=False,
        doc="Cluster state file, inside dir, written by the node.")
    cluster_seeds: list[Seed] = directive(
        SeedList(), [], runtime=True,
        doc="(ext) host:port[,host:port...] (client ports, as CLUSTER MEET): names "
            "resolved and met at start and every few seconds while the node is alone.")
    cluster_auth_pass: str = directive(
        String(check=_password), "", runtime=True,
        doc="(ext) Shared secret every bus link proves (HMAC challenge-response) before "
            "any message; frames then carry a per-link MAC. Empty: no bus authentication.")
    cluster_auth_pass_previous: str = directive(
        String(check=_password), "", runtime=True,
        doc="(ext) A former cluster-auth-pass still accepted during a rotation; "
            "CONFIG SET cluster-auth-pass fills it, set it to \"\" to end the rotation.")
    cluster_node_timeout: int = directive(
        Integer(1, message="cluster node timeout must be 1 or greater"), 15000, runtime=True,
        doc="Milliseconds without an answer before a node is flagged PFAIL.")
    cluster_bus_port: int = directive(
        _PORT, 0, runtime=False,
        doc="(ext) Cluster bus port; 0 means port + 10000.")
    cluster_announce_ip: str = directive(
        String(), "", runtime=True,
        doc="(ext) Address advertised to other nodes (NAT, containers); empty: the one they see.")
    cluster_announce_port: int = directive(
        _PORT, 0, runtime=True,
        doc="(ext) Client port advertised to other nodes; 0: port.")
    cluster_announce_bus_port: int = directive(
        _PORT, 0, runtime=True,
        doc="(ext) Bus port advertised to other nodes; 0: the bus port.")
    cluster_bus_route: dict[tuple[str, int], tuple[str, int]] = directive(
        RouteList(), {}, runtime=True,
        doc="(ext) host:busport=host:port[,...]: reach the peer announcing the first "
            "bus address by dialing the second (a proxy per link); empty: dial peers directly.")
    # -- HTTP (ext): REST API, /metrics, dashboard (server/http/)
    http_port: int = directive(
        _PORT, 0, runtime=False,
        doc="(ext) HTTP port of the REST API, /metrics and the dashboard; 0 (default): off.")
    http_bind: str = directive(
        String(), "", runtime=False,
        doc="(ext) Addresses the HTTP port listens on, space separated; empty: those of bind.")
    # -- slow log, latency monitor
    slowlog_log_slower_than: int = directive(
        Integer(), 10000, runtime=True,
        doc="Log commands slower than this many microseconds; negative disables, 0 logs all.")
    slowlog_max_len: int = directive(
        Integer(0), 128, runtime=True,
        doc="Slow log entries kept.")
    latency_monitor_threshold: int = directive(
        Integer(0), 0, runtime=True,
        doc="Record events slower than this many milliseconds; 0 disables.")
    # -- advanced
    hz: int = directive(
        Integer(MIN_HZ, MAX_HZ, clamp=True), 10, runtime=True,
        doc="Accepted for compatibility (clamped to 1..500 as in Redis, shown by INFO): the node's background tasks run on their own schedule.")
    client_output_buffer_limit: dict[str, OutputBufferLimit] = directive(
        OutputBufferLimits(),
        {"normal": OutputBufferLimit(0, 0, 0),
         "slave": OutputBufferLimit(256 * _MB, 64 * _MB, 60),
         "pubsub": OutputBufferLimit(32 * _MB, 8 * _MB, 60)},
        runtime=True,
        doc="Disconnect clients whose pending output exceeds hard, or soft for "
            "soft-seconds. The normal class applies to every client (MONITOR included); "
            "slave and pubsub (no such clients here) are accepted for compatibility.")
    client_query_buffer_limit: int = directive(
        Memory(_MB, message="client-query-buffer-limit must be at least 1mb"), _GB, runtime=True,
        doc="Disconnect a client whose unparsed input exceeds this.")
    proto_max_bulk_len: int = directive(
        Memory(_MB, message="proto-max-bulk-len must be at least 1mb"), 512 * _MB, runtime=True,
        doc="Largest bulk string (job body included) a client may send.")


def _table(cls: type) -> dict[str, Directive]:
    table = {}
    for f in fields(cls):
        name = f.name.replace("_", "-")
        default = f.default if f.default_factory is MISSING else f.default_factory()
        table[name] = Directive(name, f.metadata["kind"], default, f.metadata["runtime"],
                                f.metadata["doc"])
    return table


# Directive name -> Directive, in declaration order.
DIRECTIVES: dict[str, Directive] = _table(Directives)
