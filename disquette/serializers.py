"""Job bodies: bytes pass through untouched, anything else goes through a
serializer (JSON by default, msgpack, or a user's pair of functions).

Decoding never raises: a body the serializer cannot read stays ``bytes``
(jobs written by other clients must not crash a consumer).  ``Job.raw`` always
keeps the stored bytes, so a raw body that happens to be valid JSON (``b"42"``)
is still available exactly as it was written.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import msgpack

_BYTES_LIKE = (bytes, bytearray, memoryview)


class Serializer:
    """A pair of functions: ``dumps(value) -> bytes | str`` and
    ``loads(bytes) -> value``.  ``encode`` leaves bytes-like bodies alone;
    ``decode`` returns the raw bytes when ``loads`` fails."""

    def __init__(self, dumps: Callable[[Any], Any], loads: Callable[[bytes], Any],
                 name: str = "custom") -> None:
        self.dumps = dumps
        self.loads = loads
        self.name = name

    def encode(self, value: Any) -> bytes:
        if isinstance(value, _BYTES_LIKE):
            return bytes(value)
        out = self.dumps(value)
        return out.encode() if isinstance(out, str) else bytes(out)

    def decode(self, raw: bytes) -> Any:
        try:
            return self.loads(raw)
        except Exception:  # any failure: keep the bytes (see module doc)
            return raw

    def __repr__(self) -> str:
        return f"<Serializer {self.name}>"


def _json_dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# First bytes a JSON document can start with (json.loads also reads UTF-16/32
# and a UTF-8 BOM): anything else is not JSON, and saying so before json.loads
# saves raising and catching an exception per job.
_JSON_START = frozenset(b'{["-0123456789tfn \t\r\n\x00\xef\xfe\xff')


def _json_loads(raw: bytes) -> Any:
    if not raw or raw[0] not in _JSON_START:
        raise ValueError("not JSON")
    return json.loads(raw)


def _msgpack_loads(raw: bytes) -> Any:
    return msgpack.unpackb(raw, raw=False)


JSON = Serializer(_json_dumps, _json_loads, "json")
MSGPACK = Serializer(msgpack.packb, _msgpack_loads, "msgpack")


def get_serializer(spec: Any) -> Serializer:
    """``None``/``"json"``, ``"msgpack"``, a :class:`Serializer`, a
    ``(dumps, loads)`` pair, or any object with ``dumps`` and ``loads``."""
    if spec is None or spec == "json":
        return JSON
    if spec == "msgpack":
        return MSGPACK
    if isinstance(spec, Serializer):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2 and all(map(callable, spec)):
        return Serializer(spec[0], spec[1])
    if callable(getattr(spec, "dumps", None)) and callable(getattr(spec, "loads", None)):
        return Serializer(spec.dumps, spec.loads, getattr(spec, "__name__", "custom"))
    raise ValueError(f"serializer must be 'json', 'msgpack', a Serializer or a (dumps, loads) "
                     f"pair, not {spec!r}")
