"""Where the run store is: ``$TENSORGAUGE_STORE`` (a path or a ``postgresql://`` URL),
else a SQLite file in ``$XDG_DATA_HOME/tensorgauge``."""

from __future__ import annotations

import os
from pathlib import Path

STORE_ENV = "TENSORGAUGE_STORE"


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def local_data_dir() -> Path:
    """``$XDG_DATA_HOME/tensorgauge`` (``~/.local/share/tensorgauge``)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "tensorgauge"


def default_store_path() -> Path | str:
    """``$TENSORGAUGE_STORE``, else ``$XDG_DATA_HOME/tensorgauge/runs.db``."""
    configured = os.environ.get(STORE_ENV)
    if configured:
        return configured if is_url(configured) else Path(configured).expanduser()
    return local_data_dir() / "runs.db"
