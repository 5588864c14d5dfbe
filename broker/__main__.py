"""python -m broker [disque.conf] [--directive value ...]

The process is composed in server/ (server/process.py); this entry point only
delegates to it: the one import of broker/ upward, declared in the import-linter
contract (pyproject.toml)."""

import sys

from server.process import main

if __name__ == "__main__":
    sys.exit(main())
