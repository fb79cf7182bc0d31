"""The two databases a run store can live in, behind one interface: SQLite (the
default, a file) and PostgreSQL (``postgresql://USER@HOST/DB``, for many workers
writing at once; the ``[postgres]`` extra, psycopg 3).

Both hold the same schema (:data:`SCHEMA`, with the column types each spells
its own way) and answer the same SQL, written with ``?`` placeholders.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
from pathlib import Path

from tensorgauge.errors import StoreError

SCHEMA_VERSION = 2
# What each version adds to the one before; applied in order to older stores.
MIGRATIONS = {2: "ALTER TABLE samples ADD COLUMN runnable {int};"}

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL, t {real} NOT NULL, cpu_seconds {real} NOT NULL, cores_busy {real},
    rss_bytes {int} NOT NULL, threads {int}, processes {int},
    read_bytes {int}, write_bytes {int}, uss_bytes {int}, pss_bytes {int},
    mem_used_bytes {int}, mem_available_bytes {int}, cpu_percent TEXT, gpus TEXT, runnable {int}
);
CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id, t);
CREATE TABLE IF NOT EXISTS events (
    {event_id}run_id TEXT NOT NULL, t {real} NOT NULL, pid {int}, kind TEXT NOT NULL, data TEXT
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id, t);
"""


def local_data_dir() -> Path:
    """``$XDG_DATA_HOME/tensorgauge`` (``~/.local/share/tensorgauge``)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "tensorgauge"


def is_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


class SqliteBackend:
    """One file in WAL mode; ``PRAGMA user_version`` carries the schema version."""

    errors = (sqlite3.Error,)
    event_order = "rowid"

    def __init__(self, path: Path, create: bool, threads: bool):
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
            self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=not threads)
            self.conn.execute("PRAGMA busy_timeout = 30000")
            version = self.conn.execute("PRAGMA user_version").fetchone()[0]
            _check_version(version, self.location)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            types = {"real": "REAL", "int": "INTEGER", "event_id": ""}
            if version == 0:
                self.conn.executescript("BEGIN;" + SCHEMA.format(**types)
                                        + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
            elif version < SCHEMA_VERSION:
                steps = "".join(MIGRATIONS[v].format(**types) for v in range(version + 1, SCHEMA_VERSION + 1))
                self.conn.executescript(f"BEGIN; {steps} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
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


class PostgresBackend:
    """A PostgreSQL database; the table ``tensorgauge_meta`` carries the schema version.
    Each write is its own transaction, so any number of monitors can write at once."""

    event_order = "id"

    def __init__(self, url: str, create: bool):
        try:
            import psycopg
        except ImportError:
            raise StoreError("a PostgreSQL store needs the [postgres] extra: pip install 'tensorgauge[postgres]'") \
                from None
        self.errors = (psycopg.Error,)
        self.location = re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", url)  # never print a password
        self.data_dir = local_data_dir()  # checkpoints and reports stay on this machine
        try:
            self.conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.location}: {str(exc).strip().splitlines()[0]}") from None
        types = {"real": "DOUBLE PRECISION", "int": "BIGINT", "event_id": "id BIGSERIAL PRIMARY KEY, "}
        try:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(7457)")  # one creator at a time
                self.conn.execute("CREATE TABLE IF NOT EXISTS tensorgauge_meta (key TEXT PRIMARY KEY, value TEXT)")
                row = self.conn.execute("SELECT value FROM tensorgauge_meta WHERE key = 'schema_version'").fetchone()
                version = int(row[0]) if row else 0
                _check_version(version, self.location)
                if version == 0:
                    if not create:
                        raise StoreError(f"no run store at {self.location} (record a run with 'tensorgauge run')")
                    for statement in SCHEMA.format(**types).split(";"):
                        if statement.strip():
                            self.conn.execute(statement)
                elif version < SCHEMA_VERSION:
                    for v in range(version + 1, SCHEMA_VERSION + 1):
                        self.conn.execute(MIGRATIONS[v].format(**types))
                self.conn.execute("INSERT INTO tensorgauge_meta VALUES ('schema_version', %s) ON CONFLICT (key) "
                                  "DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))
        except psycopg.Error as exc:
            raise StoreError(f"store {self.location} is not usable ({str(exc).strip().splitlines()[0]})") from None

    @staticmethod
    def _sql(sql: str) -> str:
        return sql.replace("?", "%s")

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.conn.execute(self._sql(sql), args).fetchall()

    def execute(self, sql: str, args: tuple = ()) -> None:
        self.conn.execute(self._sql(sql), args)

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(self._sql(sql), rows)

    def transaction(self):
        return self.conn.transaction()

    def close(self) -> None:
        self.conn.close()


def _check_version(version: int, location: str) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(f"store {location} has schema {version}; this tensorgauge reads up to {SCHEMA_VERSION} "
                         "(upgrade tensorgauge)")
