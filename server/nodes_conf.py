"""The cluster-config-file (nodes.conf) on disk: read once at start, written
whenever the membership asks (SaveConfig), at start and at shutdown. What the
text means is cluster/membership.py's business."""

from __future__ import annotations

import logging
import os

from broker.config import Config

log = logging.getLogger("server")


def read_nodes_conf(config: Config) -> str | None:
    """The saved text, or None when there is no file yet (first start)."""
    try:
        with open(config.cluster_config_file, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def save_nodes_conf(config: Config, text: str) -> None:
    """Write atomically (temp file + rename); a failure is logged, not fatal."""
    path = config.cluster_config_file
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("Could not save %s: %s", path, e)
