# First: with DISQUETTE_NO_EXTENSIONS=1 the pure modules shadow the compiled ones
# (protocol/build.py installs the finder that picks the .py files).
import protocol.build  # noqa: F401
