"""INFO server says what actually runs the node: the event loop (uvloop when
it is installed, as in this project's venv) and the RESP request parser."""

from __future__ import annotations

import importlib.util


def test_info_server_names_the_event_loop_and_parser(node):
    info = node.client(protocol=2).info("server")
    expected_loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    expected_parser = "hiredis" if importlib.util.find_spec("hiredis") else "python"
    assert info["multiplexing_api"] == expected_loop
    assert info["resp_parser"] == expected_parser
    assert info["compiled_core"] == "no"
