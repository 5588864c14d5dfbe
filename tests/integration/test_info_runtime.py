"""INFO server says what actually runs the node: the event loop (uvloop when
it is installed, as in this project's venv), the RESP request parser and whether
the core runs compiled."""

from __future__ import annotations

import importlib.util
import os


def test_info_server_names_the_event_loop_and_parser(node):
    info = node.client(protocol=2).info("server")
    expected_loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    # The compiled reader and core, built by `make venv`, unless the pure build is
    # asked for.
    pure = os.environ.get("DISQUETTE_NO_EXTENSIONS", "") not in ("", "0")
    expected_parser = "python" if pure else "c"
    assert info["multiplexing_api"] == expected_loop
    assert info["resp_parser"] == expected_parser
    assert info["compiled_core"] == ("no" if pure else "yes")
