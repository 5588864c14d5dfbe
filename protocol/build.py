"""Which build runs: the compiled extensions, or the pure-Python modules.

``DISQUETTE_NO_EXTENSIONS=1`` (any value but empty or 0) runs the pure build even
where the extensions are built, as aiohttp's AIOHTTP_NO_EXTENSIONS does; INFO
server says which one runs. Read once, at import: a process runs one build.

The compiled core (setup.py: mypyc) is built from the .py modules themselves:
broker/job.cpython-*.so sits beside broker/job.py and Python's path finder
prefers the extension. For the pure build a meta path finder, installed here
before any of our modules is imported (broker/ and protocol/ import this module
first), finds our packages' modules from their source files only; modules that
have no .py (protocol/request_c.pyx) are left to the usual finders, and the pure
build does not import them anyway.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import (
    BYTECODE_SUFFIXES, SOURCE_SUFFIXES, FileFinder, ModuleSpec, SourceFileLoader,
    SourcelessFileLoader,
)
from typing import Sequence

EXTENSIONS = os.environ.get("DISQUETTE_NO_EXTENSIONS", "") in ("", "0")

# The top-level packages that hold compiled twins of their .py modules.
COMPILED_PACKAGES = frozenset({"broker", "protocol", "server"})


class SourceOnlyFinder:
    """A meta path finder: our packages' modules from .py (or .pyc) files only."""

    _finders: dict[str, FileFinder] = {}

    @classmethod
    def find_spec(cls, name: str, path: Sequence[str] | None = None,
                  target: object = None) -> ModuleSpec | None:
        if name.partition(".")[0] not in COMPILED_PACKAGES:
            return None
        for entry in (sys.path if path is None else path):
            finder = cls._finders.get(entry)
            if finder is None:
                finder = cls._finders[entry] = FileFinder(
                    entry or ".", (SourceFileLoader, SOURCE_SUFFIXES),
                    (SourcelessFileLoader, BYTECODE_SUFFIXES))
            spec = finder.find_spec(name, target)
            if spec is not None:
                return spec
        return None

    @classmethod
    def invalidate_caches(cls) -> None:
        cls._finders.clear()


if not EXTENSIONS and SourceOnlyFinder not in sys.meta_path:
    sys.meta_path.insert(0, SourceOnlyFinder)
