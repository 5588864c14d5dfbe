"""CLUSTER MEET | NODES | MYID | INFO | FORGET | RESET | LEAVING | SAVECONFIG."""

from __future__ import annotations

from broker.cluster_hooks import NO_BUS, ClusterError
from broker.commands.args import SYNTAX_ERROR, parse_int
from broker.commands.table import command
from broker.dispatch import F_ADMIN, CommandError
from protocol.resp import OK, Error, Status

BUS_PORT_OFFSET = 10000


@command("cluster", -2, F_ADMIN,
         doc=("CLUSTER MEET ip port [bus-port] | NODES | MYID | INFO | FORGET id |\n"
              "RESET [SOFT|HARD] | LEAVING [yes|no] | SAVECONFIG"))
def cluster_cmd(node, client, argv):
    c = node.cluster
    if not c.enabled:
        raise CommandError(NO_BUS)
    sub = argv[1].lower()
    n = len(argv)
    now = node.clock()
    try:
        if sub == b"meet" and n in (4, 5):     # (the bus port argument is an extension)
            text = [a.decode("latin-1") for a in argv[2:]]
            port = parse_int(argv[3], f"ERR Invalid TCP port specified: {text[1]}")
            bus = parse_int(argv[4], f"ERR Invalid bus port specified: {text[2]}") if n == 5 \
                else port + BUS_PORT_OFFSET
            bad_address = CommandError(f"ERR Invalid node address specified: {text[0]}:{text[1]}")
            if not 0 < port < 65536 or not 0 < bus < 65536:
                raise bad_address
            try:
                c.meet(text[0], bus, now)
            except ClusterError:
                raise bad_address from None
            return OK
        if sub == b"nodes" and n == 2:
            return ("\n".join(c.nodes_lines()) + "\n").encode()
        if sub == b"myid" and n == 2:
            return node.myself_id.encode()
        if sub == b"info" and n == 2:
            info = c.cluster_info()
            return "".join(f"{k}:{v}\r\n" for k, v in info.items()).encode()
        if sub == b"forget" and n == 3:
            if len(argv[2]) != 40:
                raise CommandError("ERR Invalid node identifier")
            c.forget(argv[2].decode("latin-1"), now)
            return OK
        if sub == b"reset" and n in (2, 3):
            mode = argv[2].lower() if n == 3 else b"soft"
            if mode not in (b"soft", b"hard"):
                raise CommandError(SYNTAX_ERROR)
            c.reset(mode == b"hard", now)
            return OK
        if sub == b"leaving" and n in (2, 3):
            if n == 2:
                return Status("yes" if c.leaving() else "no")
            value = argv[2].lower()
            if value not in (b"yes", b"no"):
                raise CommandError("ERR Wrong argument for CLUSTER LEAVING. Use 'yes' or 'no'")
            c.set_leaving(value == b"yes", now)
            return OK
        if sub == b"saveconfig" and n == 2:
            c.save_config()
            return OK
    except ClusterError as e:
        return Error(f"ERR {e}")
    raise CommandError("ERR Wrong CLUSTER subcommand or number of arguments")
