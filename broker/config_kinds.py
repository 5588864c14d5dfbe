"""The kinds of value a directive takes (integer, memory size, yes/no, seed
list...): each parses a value as disque.conf, the command line and CONFIG SET
give it, renders it for CONFIG GET and writes it back for CONFIG REWRITE.

Parsing follows Redis on purpose: memory units where ``k`` = 1000 and
``kb`` = 1024, yes/no booleans, error texts a Redis user recognises.  A kind
raises ValueError with the bare reason; broker/config.py turns it into the
CONFIG SET or config file error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from broker.config_file import quote_arg

__all__ = [
    "Kind",
    "Integer",
    "Memory",
    "Octal",
    "Bool",
    "Enum",
    "String",
    "AddressList",
    "OutputBufferLimit",
    "OutputBufferLimits",
    "Seed",
    "SeedList",
    "RouteList",
    "CLIENT_CLASSES",
    "LLONG_MAX",
    "parse_memory",
    "format_memory",
]

MAX_BIND_ADDRESSES = 16     # Redis' cap, so both accept the same bind lines
LLONG_MAX = 2**63 - 1       # integers and sizes are C long longs in Redis


_MEM_RE = re.compile(r"([0-9]+)([a-zA-Z]*)")
_MEM_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1024,
    "m": 1000**2, "mb": 1024**2,
    "g": 1000**3, "gb": 1024**3,
}
_INT_RE = re.compile(r"-?[0-9]+")


def parse_memory(text: str) -> int:
    """``"1gb"`` -> 1073741824.  Units as Redis: k=1000, kb=1024, any case.

    Raises ValueError.  Negative sizes are refused: no Disque directive
    accepts one, and a typo like ``-1gb`` should not become "unlimited".
    """
    m = _MEM_RE.fullmatch(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _MEM_UNITS:
        raise ValueError("argument must be a memory value")
    value = int(m.group(1)) * _MEM_UNITS[unit]
    if value > LLONG_MAX:
        raise ValueError("argument must be a memory value")
    return value


def format_memory(n: int) -> str:
    """The largest binary unit that divides ``n`` exactly, as CONFIG REWRITE writes."""
    for unit, size in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _parse_int(text: str) -> int:
    # int() alone would accept " 7", "+7", "7_0" and non-ASCII digits.
    if not _INT_RE.fullmatch(text):
        raise ValueError("argument couldn't be parsed into an integer")
    value = int(text)
    if not -LLONG_MAX - 1 <= value <= LLONG_MAX:
        raise ValueError("argument couldn't be parsed into an integer")
    return value


# --------------------------------------------------------------------------
# The kinds.

RewriteLine = tuple[Any, str]  # (key, "args as written after the name")


class Kind:
    """How one kind of value is read, shown and written back."""

    # "1": exactly one argument; "+": one or more, joined with spaces before
    # parse(), which is also the shape CONFIG SET gives (a single string).
    nargs = "1"

    def parse(self, text: str, current: Any) -> Any:
        raise NotImplementedError

    def render(self, value: Any) -> str:
        return str(value)

    def file_lines(self, value: Any) -> list[RewriteLine]:
        # One line per directive, so the key does not matter.
        return [(None, self.render(value))]

    def line_key(self, args: list[str]) -> Any:
        return None

    def describe(self) -> str:
        """The kind of value, as docs/configuration.md names it."""
        return "string"


@dataclass(frozen=True)
class Integer(Kind):
    lo: int = -LLONG_MAX - 1
    hi: int = LLONG_MAX
    # Redis clamps `hz` instead of refusing it; clamp=True reproduces that.
    clamp: bool = False
    message: str | None = None

    def parse(self, text: str, current: Any) -> int:
        try:
            value = _parse_int(text)
        except ValueError:
            # "Invalid port" says more than "not an integer" when it is set.
            if self.message:
                raise ValueError(self.message) from None
            raise
        if self.clamp:
            if value < 0:
                raise ValueError("argument must be positive")
            return max(self.lo, min(self.hi, value))
        if not self.lo <= value <= self.hi:
            if self.message:
                raise ValueError(self.message)
            if self.hi == LLONG_MAX:
                raise ValueError(f"argument must be greater than or equal to {self.lo}")
            raise ValueError(f"argument must be between {self.lo} and {self.hi} inclusive")
        return value

    def describe(self) -> str:
        if self.hi != LLONG_MAX:
            return f"integer {self.lo}-{self.hi}"
        if self.lo != -LLONG_MAX - 1:
            return f"integer >= {self.lo}"
        return "integer"


@dataclass(frozen=True)
class Memory(Kind):
    lo: int = 0
    hi: int = LLONG_MAX
    message: str | None = None

    def parse(self, text: str, current: Any) -> int:
        value = parse_memory(text)
        if not self.lo <= value <= self.hi:
            raise ValueError(self.message or
                             f"argument must be a memory value of at least {format_memory(self.lo)}")
        return value

    def file_lines(self, value: int) -> list[RewriteLine]:
        return [(None, format_memory(value))]

    def describe(self) -> str:
        return f"memory >= {format_memory(self.lo)}" if self.lo else "memory"


@dataclass(frozen=True)
class Octal(Kind):
    """unixsocketperm: written and shown in octal, as chmod takes it."""

    def parse(self, text: str, current: Any) -> int:
        if not re.fullmatch(r"[0-7]+", text) or int(text, 8) > 0o777:
            raise ValueError("Invalid socket file permissions")
        return int(text, 8)

    def render(self, value: int) -> str:
        return format(value, "o")

    def describe(self) -> str:
        return "octal"


@dataclass(frozen=True)
class Bool(Kind):
    def parse(self, text: str, current: Any) -> bool:
        t = text.lower()
        if t not in ("yes", "no"):
            raise ValueError("argument must be 'yes' or 'no'")
        return t == "yes"

    def render(self, value: bool) -> str:
        return "yes" if value else "no"

    def describe(self) -> str:
        return "yes/no"


@dataclass(frozen=True)
class Enum(Kind):
    choices: tuple[str, ...] = ()
    message: str | None = None

    def parse(self, text: str, current: Any) -> str:
        t = text.lower()
        if t not in self.choices:
            raise ValueError(self.message or
                             "argument must be one of " + ", ".join(self.choices))
        return t

    def describe(self) -> str:
        return "/".join(self.choices)


@dataclass(frozen=True)
class String(Kind):
    check: Callable[[str], str | None] | None = None

    def parse(self, text: str, current: Any) -> str:
        if self.check is not None:
            problem = self.check(text)
            if problem:
                raise ValueError(problem)
        return text

    def file_lines(self, value: str) -> list[RewriteLine]:
        # Redis always quotes strings on rewrite; "" must survive anyway.
        return [(None, quote_arg(value))]


@dataclass(frozen=True)
class AddressList(Kind):
    """bind: one or more addresses, space separated (as CONFIG SET gives them)."""

    nargs = "+"

    def parse(self, text: str, current: Any) -> list[str]:
        addrs = text.split()
        if not addrs:
            raise ValueError("at least one address is required")
        if len(addrs) > MAX_BIND_ADDRESSES:
            raise ValueError("Too many bind addresses specified.")
        return addrs

    def render(self, value: list[str]) -> str:
        return " ".join(value)

    def describe(self) -> str:
        return "addresses"


@dataclass(frozen=True)
class OutputBufferLimit:
    """One client class's limits: bytes, bytes, seconds (0 = no limit)."""

    hard: int
    soft: int
    soft_seconds: int


CLIENT_CLASSES = ("normal", "slave", "pubsub")
# Redis 5 renamed the "slave" class; accept the new spelling for old habits'
# sake but keep the name Disque 1.0 shows.
_CLIENT_CLASS_ALIASES = {"replica": "slave"}


@dataclass(frozen=True)
class OutputBufferLimits(Kind):
    """client-output-buffer-limit: `<class> <hard> <soft> <soft-seconds>` groups.

    Setting it changes only the classes named, like Redis, which is also why
    parse() needs the current value.  Rewrite writes one line per class.
    """

    nargs = "+"

    def parse(self, text: str, current: Any) -> dict[str, OutputBufferLimit]:
        args = text.split()
        if not args or len(args) % 4:
            raise ValueError("Wrong number of arguments in buffer limit configuration.")
        new = dict(current)
        for j in range(0, len(args), 4):
            cls = args[j].lower()
            cls = _CLIENT_CLASS_ALIASES.get(cls, cls)
            if cls not in CLIENT_CLASSES:
                raise ValueError("Invalid client class specified in buffer limit configuration.")
            try:
                hard = parse_memory(args[j + 1])
                soft = parse_memory(args[j + 2])
                secs = _parse_int(args[j + 3])
                if secs < 0:
                    raise ValueError
            except ValueError:
                raise ValueError("Error in hard, soft or soft_seconds setting "
                                 "in buffer limit configuration.") from None
            new[cls] = OutputBufferLimit(hard, soft, secs)
        return {c: new[c] for c in CLIENT_CLASSES}

    def render(self, value: dict[str, OutputBufferLimit]) -> str:
        return " ".join(f"{c} {v.hard} {v.soft} {v.soft_seconds}" for c, v in value.items())

    def file_lines(self, value: dict[str, OutputBufferLimit]) -> list[RewriteLine]:
        return [(c, f"{c} {format_memory(v.hard)} {format_memory(v.soft)} {v.soft_seconds}")
                for c, v in value.items()]

    def describe(self) -> str:
        return "class hard soft seconds"

    def line_key(self, args: list[str]) -> Any:
        if not args:
            return None
        cls = args[0].lower()
        return _CLIENT_CLASS_ALIASES.get(cls, cls)


@dataclass(frozen=True)
class Seed:
    """One cluster-seeds entry: a name (or address) and the CLIENT port, as
    CLUSTER MEET takes them; ``bus_port`` 0 means port + 10000."""

    host: str
    port: int
    bus_port: int = 0

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" + (f"@{self.bus_port}" if self.bus_port else "")


_SEED_RE = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([^\s:@\[\]]+)):([0-9]+)(?:@([0-9]+))?")


class _AddressList(Kind):
    """A directive of address entries separated by commas (or spaces), written
    back as one quoted argument."""

    nargs = "+"

    @staticmethod
    def items(text: str) -> list[str]:
        return [item for item in re.split(r"[,\s]+", text.strip()) if item]

    def file_lines(self, value: Any) -> list[RewriteLine]:
        return [(None, quote_arg(self.render(value)))]


@dataclass(frozen=True)
class SeedList(_AddressList):
    """cluster-seeds: ``host:port[@bus-port]`` entries; ``[v6addr]:port`` for
    IPv6 literals; empty for none."""

    def parse(self, text: str, current: Any) -> list[Seed]:
        seeds = []
        for item in self.items(text):
            m = _SEED_RE.fullmatch(item)
            if m is None:
                raise ValueError(f"invalid seed '{item}': expected host:port")
            port, bus = int(m.group(3)), int(m.group(4) or 0)
            if not 0 < port < 65536 or not 0 <= bus < 65536:
                raise ValueError(f"invalid seed '{item}': port out of range")
            seeds.append(Seed(m.group(1) or m.group(2), port, bus))
        return seeds

    def render(self, value: list[Seed]) -> str:
        return ",".join(map(str, value))

    def describe(self) -> str:
        return "host:port list"


_ADDR = r"(?:\[([0-9A-Fa-f:.]+)\]|([^\s:@=\[\],]+)):([0-9]+)"
_ROUTE_RE = re.compile(_ADDR + "=" + _ADDR)


def _render_addr(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class RouteList(_AddressList):
    """cluster-bus-route (ext): ``host:busport=host:port`` entries. The bus
    dials the second address to reach the peer that announces the first, e.g.
    a fault proxy per directed pair of nodes (the chaos suite); what is
    announced stays the real address."""

    def parse(self, text: str, current: Any) -> dict[tuple[str, int], tuple[str, int]]:
        routes = {}
        for item in self.items(text):
            m = _ROUTE_RE.fullmatch(item)
            if m is None:
                raise ValueError(f"invalid route '{item}': expected host:busport=host:port")
            src, dst = (m.group(1) or m.group(2), int(m.group(3))), \
                (m.group(4) or m.group(5), int(m.group(6)))
            if not (0 < src[1] < 65536 and 0 < dst[1] < 65536):
                raise ValueError(f"invalid route '{item}': port out of range")
            routes[src] = dst
        return routes

    def render(self, value: dict[tuple[str, int], tuple[str, int]]) -> str:
        return ",".join(f"{_render_addr(*src)}={_render_addr(*dst)}"
                        for src, dst in value.items())

    def describe(self) -> str:
        return "route list"
