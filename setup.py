"""The node's distribution (disquette-server): what pyproject.toml leaves to
code, built by `python -m build`, `pip install .` and `make venv`.

Its version and first dependency: the SDK's version (disquette/_version.py,
the one definition), and the SDK distribution of exactly that version, which
holds the code both need (the job record, the AOF codec). Then what is
compiled: the request reader and the bus bodies' packer (Cython,
protocol/request_c.pyx and bus_c.pyx) and the hot core, compiled by mypyc
from its own .py modules, those marked so on their first line (each .so
shadows its .py; the .py stays the definition of behaviour). Where the build
runs with DISQUETTE_NO_EXTENSIONS=1 nothing is compiled and the pure-Python
modules run (protocol/build.py; the same variable at run time selects them
over a built .so).
"""

import ast
import glob
import os

from setuptools import setup

# What the node needs besides the SDK, as ranges: the versions tested as lower
# bounds (constraints.txt pins them for `make`), an upper bound only where a
# major release is known to break (msgpack 1.0 changed what it decodes by
# default).
NODE_DEPENDENCIES = [
    "msgpack>=1.2.4,<2",
    "crc32c>=2.9.post0",
    "sortedcontainers>=2.4.0",
    "uvloop>=0.23.0; sys_platform != 'win32'",
    # The HTTP shell (server/http/) and the chaos suite's fault proxy.
    "aiohttp>=3.14.5",
    # The HTTP shell's GET /metrics: a Collector over the Node.
    "prometheus-client>=0.26.0",
    # The compiled core's class options (mypyc_attr), read by the .py modules too.
    "mypy_extensions>=1.2.0",
]


def sdk_version() -> str:
    """disquette/_version.py's __version__, read without importing the SDK."""
    with open("disquette/_version.py", encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]]
    return ast.literal_eval(value)


# The modules mypyc compiles: the command path of ADDJOB, GETJOB, ACKJOB... and
# what it calls, the cluster's per-job path, the client connection's and the
# bus links' read -> decode -> handle loops (strictly typed enough for it; see
# the annotations they carry). Each says so on its first line, where it is
# edited; the Makefile's EXT_SOURCES follows the same line. (cluster/federation.py
# is not: tests/sim/test_delivery_sim.py injects a bug into its handler by
# patching the module, which a compiled caller would not see.)
MARKER = "# compiled: mypyc"
PACKAGES = ("protocol", "broker", "cluster", "server")


def compiled_modules() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted(glob.glob(f"{package}/**/*.py", recursive=True)):
            with open(path, encoding="utf-8") as f:
                if f.readline().startswith(MARKER):
                    found.append(path)
    return found


ext_modules = []
if os.environ.get("DISQUETTE_NO_EXTENSIONS", "") in ("", "0"):
    # Build requirements (pyproject.toml), imported only for a compiled build.
    from Cython.Build import cythonize
    from mypyc.build import mypycify

    ext_modules = cythonize(["protocol/request_c.pyx", "protocol/bus_c.pyx"],
                            language_level=3)
    # mypy reads the modules these import for their types, without checking them.
    ext_modules += mypycify(["--follow-imports=silent", "--ignore-missing-imports",
                             *compiled_modules()])

VERSION = sdk_version()
setup(version=VERSION, install_requires=[f"disquette=={VERSION}", *NODE_DEPENDENCIES],
      ext_modules=ext_modules)
