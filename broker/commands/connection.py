"""Connection commands: HELLO, AUTH, CLIENT, PING, ECHO, QUIT."""

from __future__ import annotations

import hmac

from broker.commands.args import SYNTAX_ERROR, parse_int
from broker.commands.table import command
from broker.dispatch import F_FAST, F_LOADING, F_NOAUTH, CommandError
from disquette._version import __version__ as VERSION
from protocol.resp import OK, Error, Map, Status

PONG = Status("PONG")
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
# Disque's answer to a CLIENT call it does not know (ours knows a few more).
CLIENT_SYNTAX = ("ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | "
                 "SETNAME connection-name)")


def advertised_address(node) -> tuple[str, int]:
    cfg = node.config
    ip = cfg.cluster_announce_ip or (cfg.bind[0] if cfg.bind else "127.0.0.1")
    if ip in ("0.0.0.0", "::", "*"):
        ip = "127.0.0.1"
    return ip, cfg.cluster_announce_port or cfg.client_port


def _check_password(node, client, user: bytes, password: bytes):
    required = node.config.requirepass
    if not required:
        raise CommandError(
            "ERR AUTH <password> called without any password configured for the default "
            "user. Are you sure your configuration is correct?")
    if user.lower() != b"default" or not hmac.compare_digest(password, required.encode()):
        raise CommandError(WRONGPASS)
    client.authenticated = True


@command("auth", -2, F_NOAUTH | F_LOADING | F_FAST, doc="AUTH [username] password")
def auth(node, client, argv):
    if len(argv) > 3:
        raise CommandError(SYNTAX_ERROR)
    if len(argv) == 2:
        # Disque's AUTH password, with Disque's answers.
        required = node.config.requirepass
        if not required:
            raise CommandError("ERR Client sent AUTH, but no password is set")
        client.authenticated = hmac.compare_digest(argv[1], required.encode())
        if not client.authenticated:
            raise CommandError("ERR invalid password")
        return OK
    _check_password(node, client, argv[1], argv[2])     # (ext) Redis 6 AUTH user pass
    return OK


@command("hello", -1, F_NOAUTH | F_LOADING | F_FAST,
         doc="HELLO | HELLO protover [AUTH username password] [SETNAME name]")
def hello(node, client, argv):
    if len(argv) == 1:
        return disque_hello(node)
    try:
        proto = int(argv[1])
    except ValueError:
        raise CommandError("ERR Protocol version is not an integer or out of range") from None
    if proto not in (2, 3):
        return Error("NOPROTO unsupported protocol version")
    i = 2
    name = None
    while i < len(argv):
        opt = argv[i].lower()
        if opt == b"auth" and i + 2 < len(argv):
            _check_password(node, client, argv[i + 1], argv[i + 2])
            i += 3
        elif opt == b"setname" and i + 1 < len(argv):
            name = argv[i + 1]
            i += 2
        else:
            raise CommandError(f"ERR Syntax error in HELLO option '{opt.decode('latin-1')}'")
    if not client.authenticated:
        return Error("NOAUTH HELLO must be called with the client already authenticated, "
                     "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                     "authenticate the client and select the RESP protocol version at the "
                     "same time")
    if name is not None:
        _set_name(client, name)
    client.proto = proto
    return Map({
        b"server": b"disque",
        b"version": VERSION.encode(),
        b"proto": proto,
        b"id": client.id,
        b"mode": b"cluster" if node.cluster.enabled else b"standalone",
        b"role": b"master",
        b"modules": [],
    })


def disque_hello(node) -> list:
    """Disque's HELLO: [1, my id, [id, ip, port, priority]...] for every known node."""
    ip, port = advertised_address(node)
    entries = node.cluster.hello_entries(node.myself_id, ip, port)
    return [1, node.myself_id.encode(), *entries]


@command("ping", -1, F_FAST, doc="PING [message]")
def ping(node, client, argv):
    if len(argv) > 2:
        raise CommandError("ERR wrong number of arguments for 'ping' command")
    return argv[1] if len(argv) == 2 else PONG


@command("echo", 2, F_FAST, doc="ECHO message")
def echo(node, client, argv):
    return argv[1]


@command("quit", -1, F_NOAUTH | F_LOADING | F_FAST,
         doc="QUIT: close the connection after this reply.")
def quit_(node, client, argv):
    client.closing = True
    return OK


def _set_name(client, name: bytes) -> None:
    if any(c <= 32 or c > 126 for c in name):
        raise CommandError("ERR Client names cannot contain spaces, newlines or special "
                           "characters.")
    client.name = name


def client_info_line(node, c, now: int) -> bytes:
    flags = "b" if c.blocked_on is not None else ("O" if c.monitor else "N")
    return (
        f"id={c.id} addr={c.addr} laddr={c.laddr} fd={c.fd} "
        f"name={c.name.decode('latin-1')} age={(now - c.ctime) // 1000} "
        f"idle={(now - c.last_interaction) // 1000} flags={flags} db=0 sub=0 psub=0 "
        f"multi=-1 qbuf=0 qbuf-free=0 obl=0 oll=0 omem=0 events=r "
        f"cmd={c.last_cmd.decode('latin-1')} user=default "
        f"lib-name={c.lib_name.decode('latin-1')} lib-ver={c.lib_ver.decode('latin-1')} "
        f"resp={c.proto}"
    ).encode()


@command("client", -2, doc="CLIENT SETNAME|GETNAME|SETINFO|LIST|KILL|ID|INFO ...")
def client_cmd(node, client, argv):
    sub = argv[1].lower()
    n = len(argv)
    if sub == b"id" and n == 2:
        return client.id
    if sub == b"setname" and n == 3:
        _set_name(client, argv[2])
        return OK
    if sub == b"getname" and n == 2:
        return client.name or None
    if sub == b"setinfo" and n == 4:
        attr = argv[2].lower()
        value = argv[3]
        if any(c < 33 or c > 126 for c in value):
            raise CommandError(f"ERR {attr.decode('latin-1')} cannot contain spaces, newlines "
                               "or special characters.")
        if attr == b"lib-name":
            client.lib_name = value
        elif attr == b"lib-ver":
            client.lib_ver = value
        else:
            raise CommandError(f"ERR Unrecognized option '{argv[2].decode('latin-1')}'")
        return OK
    if sub == b"info" and n == 2:
        return client_info_line(node, client, node.clock()) + b"\n"
    if sub == b"list":
        ids = None
        if n >= 4 and argv[2].lower() == b"id":
            ids = {parse_int(a) for a in argv[3:]}
        elif n == 4 and argv[2].lower() == b"type":
            _client_type(argv[3])
        elif n != 2:
            raise CommandError(CLIENT_SYNTAX)
        now = node.clock()
        return b"".join(client_info_line(node, c, now) + b"\n"
                        for c in node.clients.values() if ids is None or c.id in ids)
    if sub == b"kill":
        if n == 2:
            raise CommandError(SYNTAX_ERROR)
        return _client_kill(node, client, argv)
    if sub == b"help":
        return [b"CLIENT <subcommand> [<arg> ...]. Subcommands are:",
                b"ID, GETNAME, SETNAME <name>, SETINFO <lib-name|lib-ver> <value>, INFO,",
                b"LIST [TYPE normal|ID id ...], KILL <ip:port> | KILL <filter> <value> ..."]
    raise CommandError(CLIENT_SYNTAX)


def _client_kill(node, client, argv):
    if len(argv) == 3:  # old form: CLIENT KILL addr:port
        for c in list(node.clients.values()):
            if c.addr == argv[2].decode("latin-1"):
                _kill(node, client, c)
                return OK
        return Error("ERR No such client")
    if len(argv) % 2:
        raise CommandError(SYNTAX_ERROR)
    filters = {}
    skipme = True
    for i in range(2, len(argv), 2):
        key, value = argv[i].lower(), argv[i + 1]
        if key == b"id":
            filters["id"] = parse_int(value)
        elif key in (b"addr", b"laddr"):
            filters[key.decode()] = value.decode("latin-1")
        elif key == b"user":
            filters["user"] = value
        elif key == b"skipme":
            if value.lower() not in (b"yes", b"no"):
                raise CommandError(SYNTAX_ERROR)
            skipme = value.lower() == b"yes"
        elif key == b"type":
            filters["type"] = _client_type(value)
        else:
            raise CommandError(SYNTAX_ERROR)
    killed = 0
    for c in list(node.clients.values()):
        if skipme and c is client:
            continue
        if "id" in filters and c.id != filters["id"]:
            continue
        if "addr" in filters and c.addr != filters["addr"]:
            continue
        if "laddr" in filters and c.laddr != filters["laddr"]:
            continue
        if "user" in filters and filters["user"] != b"default":
            continue
        if "type" in filters and filters["type"] != b"normal":
            continue
        _kill(node, client, c)
        killed += 1
    return killed


def _client_type(name: bytes) -> bytes:
    """A client type name (LIST TYPE, KILL TYPE): every client here is "normal"."""
    if name.lower() not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
        raise CommandError(f"ERR Unknown client type '{name.decode('latin-1')}'")
    return name.lower()


def _kill(node, me, victim) -> None:
    victim.closing = True
    if victim is not me:
        node.host.close_client(victim)
