"""Where the run store is: ``$TENSORGAUGE_STORE`` (a path or a ``postgresql://`` URL),
else a SQLite file in ``$XDG_DATA_HOME/tensorgauge``."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tensorgauge.errors import StoreError

STORE_ENV = "TENSORGAUGE_STORE"


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


# libpq's key=value form (``host=db dbname=runs password=...``): a word libpq knows, then '='.
_CONNINFO = re.compile(r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|passfile|service|sslmode|sslpassword|"
                       r"sslkey|sslcert|sslrootcert|connect_timeout|application_name|options|target_session_attrs)"
                       r"\s*=", re.IGNORECASE)


def check_location(location: str) -> None:
    """Refuses a libpq key=value string, which would otherwise be taken as a SQLite file's name (a file
    named with the password, in the working folder). The string is not repeated: it may hold a password."""
    if not is_url(location) and _CONNINFO.search(location):
        raise StoreError("the store location looks like a libpq key=value string (host=... dbname=...), which "
                         "tensorgauge does not read: give a postgresql://USER@HOST/DB URL")


def local_data_dir() -> Path:
    """``$XDG_DATA_HOME/tensorgauge`` (``~/.local/share/tensorgauge``)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "tensorgauge"


def default_store_path() -> Path | str:
    """``$TENSORGAUGE_STORE``, else ``$XDG_DATA_HOME/tensorgauge/runs.db``."""
    configured = os.environ.get(STORE_ENV)
    if configured:
        return configured if is_url(configured) else Path(configured).expanduser()
    return local_data_dir() / "runs.db"
