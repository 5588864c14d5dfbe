"""Which build runs: the compiled extensions, or the pure-Python modules.

``DISQUETTE_NO_EXTENSIONS=1`` (any value but empty or 0) runs the pure build even
where the extensions are built, as aiohttp's AIOHTTP_NO_EXTENSIONS does; INFO
server says which one runs. Read once, at import: a process runs one build.
"""

from __future__ import annotations

import os

EXTENSIONS = os.environ.get("DISQUETTE_NO_EXTENSIONS", "") in ("", "0")
