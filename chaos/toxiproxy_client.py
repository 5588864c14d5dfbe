"""toxiproxy-python (0.1.1) with the calls it lacks, over the same HTTP API.

The released client creates, lists, enables, disables and destroys proxies,
adds and lists toxics, and calls /reset and /version, all through its
``APIConsumer`` (one server per process: ``update_api_consumer``).  It has no
call to update a toxic, read one toxic, populate server-side (its
``populate`` loops over ``create``), or change a proxy's addresses, and
``add_toxic`` drops the server's answer.  These subclasses add those, with the
same requests calls, URL scheme and exceptions (``ProxyExists`` on 409,
``NotFound`` on 404, ``InvalidToxic`` on 400; ``ToxiproxyError`` on a 500, which
the base client lets through)::

    server = ChaosToxiproxy("127.0.0.1", 8474)
    link = server.create(upstream="127.0.0.1:17711", name="n1-n2", listen="127.0.0.1:0")
    toxic = link.add_toxic(type="latency", attributes={"latency": 200})
    link.update_toxic(toxic.name, attributes={"latency": 500})
"""

from __future__ import annotations

from typing import Any

from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import ProxyExists
from toxiproxy.proxy import Proxy
from toxiproxy.server import Toxiproxy
from toxiproxy.toxic import Toxic


class ToxiproxyError(Exception):
    """A server error the base client lets through (500: a listen failure)."""


def _checked(response: Any) -> Any:
    if response.status_code >= 500:
        raise ToxiproxyError(response.content)
    return response


def _toxic(proxy: str, data: dict[str, Any]) -> Toxic:
    return Toxic(proxy=proxy, **data)


class ChaosProxy(Proxy):
    """A proxy whose toxic calls return what the server answered."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.toxics_at_read = [_toxic(self.name, t) for t in kwargs.get("toxics") or []]

    def add_toxic(self, **kwargs: Any) -> Toxic:
        """As ``Proxy.add_toxic`` (same defaults), returning the created toxic."""
        toxic = Toxic(**kwargs)             # the base class's defaults for name/stream/toxicity
        body = {"name": toxic.name, "type": toxic.type, "stream": toxic.stream,
                "toxicity": toxic.toxicity, "attributes": toxic.attributes}
        data = APIConsumer.post("/proxies/%s/toxics" % self.name, json=body).json()
        return _toxic(self.name, data)

    def toxic(self, toxic_name: str) -> Toxic:
        """GET one toxic; ``NotFound`` if it does not exist."""
        data = APIConsumer.get("/proxies/%s/toxics/%s" % (self.name, toxic_name)).json()
        return _toxic(self.name, data)

    def update_toxic(self, toxic_name: str, attributes: dict[str, Any] | None = None,
                     toxicity: float | None = None) -> Toxic:
        """Change some attributes and/or the toxicity of a toxic, on live
        connections too."""
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = attributes
        if toxicity is not None:
            body["toxicity"] = toxicity
        data = APIConsumer.post("/proxies/%s/toxics/%s" % (self.name, toxic_name),
                                json=body).json()
        return _toxic(self.name, data)

    def update(self, **fields: Any) -> "ChaosProxy":
        """Change ``listen``, ``upstream`` and/or ``enabled``."""
        data = _checked(APIConsumer.post("/proxies/%s" % self.name, json=fields)).json()
        self.__init__(**data)
        return self


class ChaosToxiproxy(Toxiproxy):
    """The server, pointed at ``host:port``, handing out ``ChaosProxy``s."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8474) -> None:
        self.update_api_consumer(host, port)

    def proxies(self) -> dict[str, ChaosProxy]:
        return {name: ChaosProxy(**values)
                for name, values in APIConsumer.get("/proxies").json().items()}

    def create(self, upstream: str, name: str, listen: str | None = None,
               enabled: bool | None = None) -> ChaosProxy:
        """As ``Toxiproxy.create``; a listen failure raises ``ToxiproxyError``
        (the base class fails on the error body with a KeyError)."""
        if name in self.proxies():
            raise ProxyExists("This proxy already exists.")
        body: dict[str, Any] = {"upstream": upstream, "name": name,
                                "listen": "127.0.0.1:0" if listen is None else listen}
        if enabled is not None:
            body["enabled"] = enabled
        return ChaosProxy(**_checked(APIConsumer.post("/proxies", json=body)).json())

    def populate_server(self, proxies: list[dict[str, Any]]) -> list[ChaosProxy]:
        """POST /populate: create or replace the listed proxies in one call
        (an existing proxy with the same listen and upstream is kept)."""
        data = _checked(APIConsumer.post("/populate", json=proxies)).json()
        return [ChaosProxy(**p) for p in data.get("proxies") or []]
