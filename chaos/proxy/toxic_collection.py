"""The toxics of one proxy, per direction, in the order they were added
(``toxic_collection.go``).  Changes apply to the proxy's live connections too."""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

from chaos.proxy.errors import (
    INVALID_STREAM, INVALID_TOXIC_TYPE, TOXIC_ALREADY_EXISTS, TOXIC_NOT_FOUND, read_json,
    read_struct,
)
from chaos.proxy.gojson import FLOAT32, STRING, field
from chaos.proxy.link import Connection, Link
from chaos.proxy.toxics import DIRECTIONS, DOWNSTREAM, TOXIC_TYPES, ToxicSpec

WRAPPER_FIELDS = {"name": STRING, "type": STRING, "stream": STRING, "toxicity": FLOAT32}


def _decode(value: Any, fields: dict[str, str], into: dict, struct: str) -> dict:
    return read_struct(value, fields, into, struct, f"toxics.{struct}")


class ToxicCollection:
    def __init__(self, connections: set[Connection]) -> None:
        self.connections = connections     # the proxy's live connections (its own set)
        self.chains: dict[str, list[ToxicSpec]] = {d: [] for d in DIRECTIONS}
        # Held while a chain changes and while a new connection copies it, so
        # every connection sees each change exactly once.
        self.lock = asyncio.Lock()

    def all(self) -> list[ToxicSpec]:
        return [spec for d in DIRECTIONS for spec in self.chains[d]]

    def find(self, name: str) -> ToxicSpec | None:
        return next((spec for spec in self.all() if spec.name == name), None)

    def chains_copy(self) -> dict[str, list[ToxicSpec]]:
        return {d: list(chain) for d, chain in self.chains.items()}

    def _links(self, direction: str) -> Iterator[Link]:
        for conn in list(self.connections):
            yield conn.links[direction]

    async def add_json(self, data: bytes) -> ToxicSpec:
        value = read_json(data)
        async with self.lock:
            wrapper = _decode(value, WRAPPER_FIELDS,
                              {"name": "", "type": "", "stream": DOWNSTREAM, "toxicity": 1.0},
                              "ToxicWrapper")
            if isinstance(value, dict):
                _decode(field(value, "attributes"), {}, {}, "ToxicWrapper.attributes")
            if wrapper["stream"].lower() not in DIRECTIONS:
                raise INVALID_STREAM
            name = wrapper["name"] or f"{wrapper['type']}_{wrapper['stream']}"
            cls = TOXIC_TYPES.get(wrapper["type"])
            if cls is None:
                raise INVALID_TOXIC_TYPE
            if self.find(name):
                raise TOXIC_ALREADY_EXISTS
            attrs = _decode(field(value, "attributes"), cls.fields, cls().attributes(),
                            f"{cls.__name__}Toxic")
            spec = ToxicSpec(name, wrapper["type"], wrapper["stream"], wrapper["toxicity"],
                             cls(**attrs))
            self.chains[spec.direction].append(spec)
            for link in self._links(spec.direction):
                link.add_toxic(spec)
            return spec

    async def update_json(self, name: str, data: bytes) -> ToxicSpec:
        async with self.lock:
            spec = self.find(name)
            if spec is None:
                raise TOXIC_NOT_FOUND
            value = read_json(data)
            if value is not None and not isinstance(value, dict):
                _decode(value, {}, {}, "ToxicWrapper")
            value = value or {}
            toxicity = _decode(value, {"toxicity": FLOAT32}, {"toxicity": spec.toxicity},
                               "ToxicWrapper")["toxicity"]
            attrs = _decode(field(value, "attributes"), spec.toxic.fields,
                            spec.toxic.attributes(), f"{type(spec.toxic).__name__}Toxic")
            for key, item in attrs.items():
                setattr(spec.toxic, key, item)
            spec.toxicity = toxicity
            await asyncio.gather(*(link.update_toxic(spec)
                                   for link in self._links(spec.direction)))
            return spec

    async def remove(self, name: str) -> None:
        async with self.lock:
            spec = self.find(name)
            if spec is None:
                raise TOXIC_NOT_FOUND
            await self._remove(spec)

    async def _remove(self, spec: ToxicSpec) -> None:
        self.chains[spec.direction].remove(spec)
        await asyncio.gather(*(link.remove_toxic(spec) for link in self._links(spec.direction)))

    async def reset(self) -> None:
        async with self.lock:
            for spec in self.all():
                await self._remove(spec)
