"""The compiled extensions, built by `pip install .` and `make venv`.

pyproject.toml holds the project's metadata; this file only says what is
compiled: the request reader and the bus bodies' packer (Cython,
protocol/request_c.pyx and bus_c.pyx) and the hot core, compiled by mypyc
from its own .py modules, those marked so on their first line (each .so
shadows its .py; the .py stays the definition of behaviour). Where the build
runs with DISQUETTE_NO_EXTENSIONS=1 nothing is compiled and the pure-Python
modules run (protocol/build.py; the same variable at run time selects them
over a built .so).
"""

import glob
import os

from setuptools import setup

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

setup(ext_modules=ext_modules)
