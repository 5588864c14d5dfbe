"""The process and its shells (client RESP, cluster bus, AOF file), the output
driver they share with in-process nodes and the simulator. A node is composed
in server/compose.py; the process runs it in server/process.py (set up by
server/main.py)."""

# First: with DISQUETTE_NO_EXTENSIONS=1 the pure modules shadow the compiled ones
# (protocol/build.py installs the finder that picks the .py files; server/resp.py
# and server/driver.py are compiled too).
import protocol.build  # noqa: F401, E402
