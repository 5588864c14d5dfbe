"""A fault proxy that speaks Toxiproxy's HTTP API (``python -m chaos.proxy``).

No Toxiproxy server can be installed here, so the chaos suite ships this one;
``toxiproxy-python`` (and any Toxiproxy client) drives it unchanged, and the
suite can drive a real Toxiproxy the same way.  See ``api.py`` for the routes,
``toxics.py`` for the toxics, ``link.py`` for how bytes flow.
"""

from chaos.proxy.api import VERSION, FaultProxyServer

__all__ = ["FaultProxyServer", "VERSION"]
