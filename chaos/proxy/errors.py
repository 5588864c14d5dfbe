"""The API's errors, with Toxiproxy's texts and status codes (``api.go``)."""

from __future__ import annotations

from typing import Any

from chaos.proxy.gojson import DecodeError, decode_struct, loads_first


class ApiError(Exception):
    """Answered as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    def joined(self, detail: str) -> "ApiError":
        """Go's joinError: ``"<message>: <detail>"`` with the same status."""
        return ApiError(f"{self.message}: {detail}", self.status)

    def to_json(self) -> dict:
        return {"error": self.message, "status": self.status}


BAD_REQUEST_BODY = ApiError("bad request body", 400)
MISSING_FIELD = ApiError("missing required field", 400)
PROXY_NOT_FOUND = ApiError("proxy not found", 404)
PROXY_ALREADY_EXISTS = ApiError("proxy already exists", 409)
INVALID_STREAM = ApiError("stream was invalid, can be either upstream or downstream", 400)
INVALID_TOXIC_TYPE = ApiError("invalid toxic type", 400)
TOXIC_ALREADY_EXISTS = ApiError("toxic already exists", 409)
TOXIC_NOT_FOUND = ApiError("toxic not found", 404)


def internal(message: str) -> ApiError:
    """An error Go did not give a status (a listen failure, say): 500."""
    return ApiError(message, 500)


def read_json(data: bytes) -> Any:
    """A request body's first JSON value; 400 "bad request body: ..." if none."""
    try:
        return loads_first(data)
    except DecodeError as exc:
        raise BAD_REQUEST_BODY.joined(str(exc)) from None


def read_struct(value: Any, fields: dict[str, str], into: dict[str, Any], struct: str,
                go_type: str) -> dict[str, Any]:
    """``gojson.decode_struct`` with its errors answered as bad request bodies."""
    try:
        return decode_struct(value, fields, into, struct, go_type)
    except DecodeError as exc:
        raise BAD_REQUEST_BODY.joined(str(exc)) from None
