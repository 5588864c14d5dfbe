"""JSON as Toxiproxy's Go server reads and writes it.

Toxiproxy decodes request bodies with ``encoding/json`` into typed structs and
answers with ``json.Marshal``; clients see its quirks, so we keep them:
keys match struct fields case-insensitively, ``null`` leaves a field as it
was, unknown keys are ignored, only the first JSON value of a body is read,
a value of the wrong type is an error naming the field, and output is compact
with ``<``, ``>`` and ``&`` escaped.
"""

from __future__ import annotations

import json
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = INT64_MIN, INT64_MAX          # Go's int is 64-bit on our targets

# Field kinds a struct may have, by their Go type name.
STRING, BOOL, INT64, INT, FLOAT32 = "string", "bool", "int64", "int", "float32"


class DecodeError(ValueError):
    """The text ``encoding/json`` would put in its error (without the API's prefix)."""


def dumps(value: Any) -> bytes:
    """``json.Marshal``: compact, HTML-safe, integral floats without ``.0``."""
    text = json.dumps(_go_numbers(value), separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return text.encode()


def _go_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _go_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_numbers(v) for v in value]
    return value


def loads_first(body: bytes) -> Any:
    """The first JSON value of ``body``, as ``json.Decoder.Decode`` reads it."""
    text = body.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise DecodeError("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(text.rstrip()):
            raise DecodeError("unexpected EOF") from None
        char = text[exc.pos]
        where = "looking for beginning of value" if exc.pos == 0 else "in JSON document"
        raise DecodeError(f"invalid character {char!r} {where}") from None
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def convert(value: Any, kind: str, where: str) -> Any:
    """``value`` as a Go field of ``kind``; ``where`` names it in the error."""
    ok = {
        STRING: isinstance(value, str),
        BOOL: isinstance(value, bool),
        FLOAT32: isinstance(value, (int, float)) and not isinstance(value, bool),
    }.get(kind)
    if kind in (INT64, INT):
        ok = (isinstance(value, int) and not isinstance(value, bool)
              and INT64_MIN <= value <= INT64_MAX)
        if not ok and _json_kind(value) == "number":
            raise DecodeError(f"json: cannot unmarshal number {value} into Go struct "
                              f"field {where} of type {kind}")
    if not ok:
        raise DecodeError(f"json: cannot unmarshal {_json_kind(value)} into Go struct "
                          f"field {where} of type {kind}")
    return float(value) if kind == FLOAT32 else value


def value_type_error(value: Any, go_type: str) -> DecodeError:
    return DecodeError(f"json: cannot unmarshal {_json_kind(value)} into Go value "
                       f"of type {go_type}")


def decode_struct(value: Any, fields: dict[str, str], into: dict[str, Any],
                  struct: str, go_type: str) -> dict[str, Any]:
    """Decode a JSON object into ``into`` (a copy is returned), as
    ``json.Unmarshal`` fills a struct whose fields (json name -> kind) are
    ``fields``.  The first type error is raised after the whole object is read,
    as Go does, so valid fields are not reported instead of it."""
    if value is None:
        return dict(into)
    if not isinstance(value, dict):
        raise value_type_error(value, go_type)
    out = dict(into)
    first_error: DecodeError | None = None
    by_lower = {name.lower(): name for name in fields}
    for key, item in value.items():
        name = key if key in fields else by_lower.get(key.lower())
        if name is None or item is None:
            continue
        try:
            out[name] = convert(item, fields[name], f"{struct}.{name}")
        except DecodeError as exc:
            first_error = first_error or exc
    if first_error:
        raise first_error
    return out


def field(value: dict[str, Any], name: str) -> Any:
    """The value of key ``name`` matched as Go matches it (exact, then any case)."""
    if name in value:
        return value[name]
    for key, item in value.items():
        if key.lower() == name.lower():
            return item
    return None
