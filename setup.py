"""The compiled extensions (Cython), built by `pip install .` and `make venv`.

pyproject.toml holds the project's metadata; this file only lists what is
compiled. Where the build runs with DISQUETTE_NO_EXTENSIONS=1 nothing is
compiled and the pure-Python modules run (protocol/build.py).
"""

import os

from setuptools import setup

ext_modules = []
if os.environ.get("DISQUETTE_NO_EXTENSIONS", "") in ("", "0"):
    from Cython.Build import cythonize  # a build requirement (pyproject.toml)

    ext_modules = cythonize(["protocol/request_c.pyx"], language_level=3)

setup(ext_modules=ext_modules)
