"""Reply values (what ``Node.handle_command`` returns) as JSON documents, and
RESP errors as HTTP errors. Pure functions: no aiohttp, no Node.

Bodies are bytes (binary safe). In JSON a body is ``"body": "<text>"`` when its
bytes are valid UTF-8, else ``"body_base64": "<base64>"`` (the SDK's
dead-letter convention), so nothing is lost; ``encoding=base64`` asks for
``body_base64`` always.
"""

from __future__ import annotations

import base64
import binascii

from protocol.resp import Error

# The RESP error code (the error's first word) -> HTTP status. Codes not
# listed are the client's fault (400); "ERR internal error" is ours (500).
ERROR_STATUS = {
    "ERR": 400,
    "BADID": 400,
    "NOJOB": 404,
    "TOOLATE": 409,
    "PAUSED": 409,
    "MAXLEN": 409,
    "NOAUTH": 401,
    "WRONGPASS": 401,
    "NOREPL": 503,
    "LOADING": 503,
    "LEAVING": 503,
    "OOM": 507,
    "MISCONF": 507,
}
INTERNAL_ERROR = "ERR internal error"


class HttpError(Exception):
    """A request refused: ``status``, the stable ``code`` (a RESP error code
    such as PAUSED, or one of the HTTP layer's: BADREQUEST, NOTFOUND,
    TOOLARGE, UNSUPPORTED) and the message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def document(self) -> dict:
        return {"error": self.code, "message": self.message}


def from_resp_error(err: str) -> HttpError:
    """A RESP error reply as an HTTP error with its code and text."""
    code = err.split(" ", 1)[0] or "ERR"
    if err.startswith(INTERNAL_ERROR):
        return HttpError(500, "INTERNAL", err)
    return HttpError(ERROR_STATUS.get(code, 400), code, err)


def bad_request(message: str) -> HttpError:
    return HttpError(400, "BADREQUEST", message)


def check(reply):
    """The reply, or raise its HttpError if it is an error reply."""
    if reply.__class__ is Error:
        raise from_resp_error(reply)
    return reply


# ---------------------------------------------------------------------- bodies
def put_body(doc: dict, body: bytes, force_base64: bool = False) -> dict:
    """Add ``body`` (UTF-8 text) or ``body_base64`` to ``doc``."""
    if not force_base64:
        try:
            doc["body"] = body.decode("utf-8")
            return doc
        except UnicodeDecodeError:
            pass
    doc["body_base64"] = base64.b64encode(body).decode("ascii")
    return doc


def take_body(item: dict, where: str) -> bytes:
    """The job body of a request item: ``body`` (a string, sent as UTF-8) or
    ``body_base64`` (exact bytes); exactly one of them."""
    if "body" in item:
        if "body_base64" in item:
            raise bad_request(f"{where}: give body or body_base64, not both")
        body = item["body"]
        if not isinstance(body, str):
            raise bad_request(f"{where}: body must be a string (binary: body_base64)")
        return body.encode("utf-8", "surrogatepass")
    if "body_base64" in item:
        b64 = item["body_base64"]
        if not isinstance(b64, str):
            raise bad_request(f"{where}: body_base64 must be a string")
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(f"{where}: body_base64 is not valid base64") from None
    raise bad_request(f"{where}: body or body_base64 is required")


def text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


# ----------------------------------------------------------------- job shapes
def job_entry(entry: list, force_base64: bool = False) -> dict:
    """One GETJOB/QPEEK entry ``[queue, id, body(, "nacks", n,
    "additional-deliveries", n)]``."""
    doc = {"queue": text(entry[0]), "id": text(entry[1])}
    put_body(doc, entry[2], force_base64)
    if len(entry) >= 7:
        doc["nacks"] = entry[4]
        doc["additional_deliveries"] = entry[6]
    return doc


def jobs_list(reply, force_base64: bool = False) -> list:
    """A GETJOB/QPEEK reply (a list, or the null array) as job documents."""
    if not isinstance(reply, list):
        return []
    return [job_entry(e, force_base64) for e in reply]


def _key(name: bytes) -> str:
    return name.decode("ascii").replace("-", "_")


def show_document(reply: list, force_base64: bool = False) -> dict:
    """SHOW's flat field/value array as an object (names with ``_``)."""
    doc = {}
    for i in range(0, len(reply), 2):
        name, value = reply[i], reply[i + 1]
        if name == b"body":
            put_body(doc, value, force_base64)
        elif isinstance(value, list):
            doc[_key(name)] = [text(v) for v in value]
        elif isinstance(value, (bytes, str)):
            doc[_key(name)] = text(value)
        else:
            doc[_key(name)] = value
    return doc


def qstat_document(reply: list) -> dict:
    """QSTAT's flat field/value array as an object."""
    doc = {}
    for i in range(0, len(reply), 2):
        name, value = reply[i], reply[i + 1]
        if isinstance(value, list):
            value = [text(v) for v in value]
        elif isinstance(value, (bytes, str)):
            value = text(value)
        doc[_key(name)] = value
    return doc


def cluster_document(hello: list, nodes_text: bytes, info_text: bytes) -> dict:
    """HELLO + CLUSTER NODES + CLUSTER INFO as one object: every known node
    with its address, HELLO priority, flags and link."""
    priorities = {text(e[0]): int(e[3]) for e in hello[2:]}
    nodes = []
    for line in text(nodes_text).splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        ip, _, port = parts[1].rpartition(":")
        flags = [] if parts[2] == "noflags" else parts[2].split(",")
        nodes.append({
            "id": parts[0], "ip": ip, "port": int(port) if port.isdigit() else 0,
            "flags": flags, "myself": "myself" in flags,
            "priority": priorities.get(parts[0]),
            "ping_sent": int(parts[3]), "pong_received": int(parts[4]),
            "link": parts[5],
        })
    info = {}
    for line in text(info_text).splitlines():
        k, sep, v = line.partition(":")
        if sep:
            info[k] = int(v) if v.lstrip("-").isdigit() else v
    return {"myself": text(hello[1]), "nodes": nodes, "info": info}
