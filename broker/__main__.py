"""python -m broker [disque.conf] [--directive value ...]"""

import sys

from broker.server import main

if __name__ == "__main__":
    sys.exit(main())
