"""Disquette's version, defined here only: both distributions are built with
it (the SDK, ``disquette``, and the node, ``disquette-server``, which requires
this same SDK version), ``disquette --version``, ``disquette-server --version``
and INFO's ``disquette_version`` show it. What a release of each kind may
change: docs/operations.md#compatibility."""

__version__ = "0.2.0"
