"""The default store: one SQLite file in WAL mode; ``PRAGMA user_version``
carries the schema version (see :mod:`.schema`)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from pathlib import Path
from urllib.parse import quote

from tensorgauge.errors import StoreError
from tensorgauge.store import schema
from tensorgauge.store.private import UntrustedPathError, check_own

TYPES = {"blob": "BLOB", "real": "REAL", "int": "INTEGER", "event_id": "", "event_order": "run_id"}
BUSY_TIMEOUT_SECONDS = 30.0  # how long a statement waits for another connection's lock


class SqliteBackend:
    errors = (sqlite3.Error,)
    event_order = "rowid"

    def __init__(self, path: Path, create: bool):
        self.path = path
        self.location = str(path)
        self.data_dir = path.parent
        try:
            info = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            info = None
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc.strerror}") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise StoreError(f"store {path} is a directory, not a database file")
        if create:
            _check_recording_paths(path)
        if info is None:
            if not create:
                raise StoreError(f"no run store at {path} (record a run with 'tensorgauge run')")
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError as exc:
                raise StoreError(f"cannot create the store's folder {path.parent}: {exc.strerror}") from None
            try:
                # Command lines may hold tokens: the store (and its -wal/-shm, which SQLite
                # gives the same mode) is readable by its owner only.
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            except FileExistsError:  # made by another monitor just now, or a link put there meanwhile
                _check_recording_paths(path)
            except OSError as exc:
                raise StoreError(f"cannot create the store {path}: {exc.strerror}") from None
        # SQLite writes its -wal and -shm files beside the store: a store in a read-only folder is read-only too.
        self.read_only = not os.access(path, os.W_OK) or not os.access(path.parent, os.W_OK)
        try:
            if self.read_only:  # e.g. a store copied off a shared drive: read it as it is, change nothing
                self.conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?immutable=1", uri=True,
                                            isolation_level=None, check_same_thread=False)
            else:
                self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None,
                                            check_same_thread=False)
            self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
            # One snapshot: another monitor may be creating this very store at the same moment.
            self.conn.execute("BEGIN")
            try:
                version = self.conn.execute("PRAGMA user_version").fetchone()[0]
                runs_columns = {row[1] for row in self.conn.execute("PRAGMA table_info(runs)")}
                names = {row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            finally:
                self.conn.execute("COMMIT")
            check_version(version, self.location)
            self.chunked = "sample_chunks" in names  # a read-only store of version 2 has no chunks
            if names and not {"run_id", "started_at", "record"} <= runs_columns:
                raise StoreError(f"{path} is an SQLite database of something else, not a tensorgauge store "
                                 "(left untouched)")
            if self.read_only:
                if version < 2:
                    raise StoreError(f"store {path} is read-only and written by an older tensorgauge: "
                                     "copy it somewhere writable to read it")
                return
            self._use_wal()
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.chunked = True
            if self._schema_steps(version) or version < schema.SCHEMA_VERSION:
                # Another monitor may create or upgrade this store at the same moment: the write lock first
                # (waited for), then a fresh look. A transaction that read first and then wrote failed at once,
                # "database is locked", when another had written in between (1 of 8 concurrent runs into a new
                # store, in CI).
                with self.transaction():
                    version = self.conn.execute("PRAGMA user_version").fetchone()[0]
                    for step in self._schema_steps(version):
                        self.conn.execute(step)
                    self.conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store {path} is not a usable tensorgauge database ({exc})") from None
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from None

    def _use_wal(self) -> None:
        """The store into WAL mode. Monitors switching a new store at the same moment hold its read lock and
        each wants the write lock: SQLite refuses one at once, "database is locked", rather than wait on a
        deadlock (13 of 320 first opens, 8 at a time). Tried again until the busy timeout: by then the
        other has switched it, and the pragma finds WAL mode."""
        deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
        while True:
            try:
                self.conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _schema_steps(self, version: int) -> list[str]:
        """The statements that bring the store, at schema ``version``, to the current one."""
        steps = schema.create_statements(TYPES) if version == 0 else []
        for table in schema.TABLE_COLUMNS if version else ():
            present = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            steps += schema.missing_columns(table, present, TYPES)
        if version:
            steps += schema.added_in_3(TYPES) if version < 3 else []
            indexes = {row[0] for row in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            steps += schema.missing_indexes(indexes, TYPES)
        return steps

    def query(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self.conn.execute(sql, args).fetchall()

    def execute(self, sql: str, args: tuple = ()) -> int:
        """Runs ``sql``; returns the number of rows it changed."""
        return self.conn.execute(sql, args).rowcount

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        self.conn.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self):
        """A write transaction: its lock taken (waited for) as it begins, so no read in it can go stale."""
        with self.conn:
            self.conn.execute("BEGIN IMMEDIATE")
            yield

    def close(self) -> None:
        self.conn.close()


def _check_recording_paths(path: Path) -> None:
    """Recording: not into a store (or its -wal, -shm) another user made or can write, nor one in a folder
    another user owns or can write (they could move or replace it), nor through a link to nothing."""
    own = "give a store of your own with --store or TENSORGAUGE_STORE"
    try:
        for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            check_own(part, "store", f"runs recorded into it would be theirs to read and change; {own}")
        check_own(Path(os.path.realpath(path)).parent, "the store's folder",
                  f"they could move or replace the store; make the folder yours and private (chown, chmod 700), or {own}")
    except UntrustedPathError as exc:
        raise StoreError(str(exc)) from None


def check_version(version: int, location: str) -> None:
    if version > schema.SCHEMA_VERSION:
        raise StoreError(f"store {location} has schema {version}; this tensorgauge reads up to {schema.SCHEMA_VERSION} "
                         "(upgrade tensorgauge)")
