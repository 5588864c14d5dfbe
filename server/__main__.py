"""python -m broker [disque.conf] [--directive value ...]

The process is set up and run in server/ (server/main.py); this entry point only
delegates to it: the one import of broker/ upward, declared in the import-linter
contract (pyproject.toml)."""

import sys

from server.main import main

if __name__ == "__main__":
    sys.exit(main())
