"""The default store: one SQLite file in WAL mode; ``PRAGMA user_version``
carries the schema version (see :mod:`.schema`)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from tensorgauge.errors import StoreError
from tensorgauge.store.schema import SCHEMA_VERSION, TABLE_COLUMNS, create_statements, missing_columns

TYPES = {"real": "REAL", "int": "INTEGER", "event_id": ""}


class SqliteBackend:
    errors = (sqlite3.Error,)
    event_order = "rowid"

    def __init__(self, path: Path, create: bool):
        self.path = path
        self.location = str(path)
        self.data_dir = path.parent
        if path.is_dir():
            raise StoreError(f"store {path} is a directory, not a database file")
        if not path.exists():
            if not create:
                raise StoreError(f"no run store at {path} (record a run with 'tensorgauge run')")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the store's folder {path.parent}: {exc.strerror}") from None
        try:
            self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            check_version(version, self.location)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            steps = create_statements(TYPES) if version == 0 else []
            for table in TABLE_COLUMNS if version else ():
                present = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
                steps += missing_columns(table, present, TYPES)
            if steps or version < SCHEMA_VERSION:
                self.conn.executescript("BEGIN;" + "".join(s + ";" for s in steps)
                                        + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store {path} is not a usable tensorgauge database ({exc})") from None
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from None

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, args).fetchall()

    def execute(self, sql: str, args: tuple = ()) -> None:
        self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        self.conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self):
        with self.conn:
            self.conn.execute("BEGIN")
            yield

    def close(self) -> None:
        self.conn.close()


def check_version(version: int, location: str) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(f"store {location} has schema {version}; this tensorgauge reads up to {SCHEMA_VERSION} "
                         "(upgrade tensorgauge)")
