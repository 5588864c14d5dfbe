"""python -m server [disque.conf] [--directive value ...]: the node, as the
``disquette-server`` command runs it (server/main.py)."""

import sys

from server.main import main

if __name__ == "__main__":
    sys.exit(main())
