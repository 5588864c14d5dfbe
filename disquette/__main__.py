"""``python -m disquette ...``: the ``disquette`` command line."""

import sys

from .cli import main

sys.exit(main())
