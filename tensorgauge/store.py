"""The run store: embedded SQLite in WAL mode, written while the job runs.

One file holds every run: ``runs`` (one JSON record each), ``samples`` and
``events``. Each sampling tick commits, so a crash of the job or the monitor
keeps everything up to that tick; a run whose monitor died stays marked
incomplete. ``PRAGMA user_version`` carries the schema version.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Iterable

from tensorgauge.errors import StoreError, UnknownRunError
from tensorgauge.model import Event, GpuReading, RunRecord, Sample

SCHEMA_VERSION = 2
# What each version adds to the one before; applied in order to older stores.
_MIGRATIONS = {2: "ALTER TABLE samples ADD COLUMN runnable INTEGER;"}
STORE_ENV = "TENSORGAUGE_STORE"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL, t REAL NOT NULL, cpu_seconds REAL NOT NULL, cores_busy REAL,
    rss_bytes INTEGER NOT NULL, threads INTEGER, processes INTEGER,
    read_bytes INTEGER, write_bytes INTEGER, uss_bytes INTEGER, pss_bytes INTEGER,
    mem_used_bytes INTEGER, mem_available_bytes INTEGER, cpu_percent TEXT, gpus TEXT, runnable INTEGER
);
CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id, t);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL, t REAL NOT NULL, pid INTEGER, kind TEXT NOT NULL, data TEXT
);
CREATE INDEX IF NOT EXISTS events_run ON events (run_id, t);
"""

_SAMPLE_COLUMNS = ("t", "cpu_seconds", "cores_busy", "rss_bytes", "threads", "processes",
                   "read_bytes", "write_bytes", "uss_bytes", "pss_bytes", "mem_used_bytes",
                   "mem_available_bytes", "cpu_percent", "gpus", "runnable")
_INSERT_SAMPLE = (f"INSERT INTO samples (run_id, {', '.join(_SAMPLE_COLUMNS)}) "
                  f"VALUES (?{', ?' * len(_SAMPLE_COLUMNS)})")


def default_store_path() -> Path:
    """``$TENSORGAUGE_STORE``, else ``$XDG_DATA_HOME/tensorgauge/runs.db``."""
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(data_home) / "tensorgauge" / "runs.db"


class Store:
    def __init__(self, conn: sqlite3.Connection, path: Path):
        self.conn, self.path = conn, path

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, create: bool = True, threads: bool = False) -> Store:
        """Open (and create, if ``create``) the store; any problem is a :class:`StoreError`.
        ``threads``: the connection will be used from another thread (one at a time)."""
        path = Path(path) if path is not None else default_store_path()
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
            conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=not threads)
            conn.execute("PRAGMA busy_timeout = 30000")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"store {path} has schema {version}; this tensorgauge reads "
                                 f"up to {SCHEMA_VERSION} (upgrade tensorgauge)")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            if version == 0:
                conn.executescript("BEGIN;" + _SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
            elif version < SCHEMA_VERSION:
                steps = "".join(_MIGRATIONS[v] for v in range(version + 1, SCHEMA_VERSION + 1))
                conn.executescript(f"BEGIN; {steps} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"store {path} is not a usable tensorgauge database ({exc})") from None
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from None
        return cls(conn, path)

    def close(self) -> None:
        self.conn.close()

    def _write(self, sql: str, rows: Iterable | None = None, many: bool = False) -> None:
        try:
            if many:
                self.conn.executemany(sql, rows)
            else:
                self.conn.execute(sql, rows or ())
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to store {self.path}: {exc}") from None

    # -- writing ---------------------------------------------------------------

    def save_run(self, record: RunRecord) -> None:
        """Insert or replace the run's record."""
        self._write("INSERT OR REPLACE INTO runs (run_id, started_at, record) VALUES (?, ?, ?)",
                    (record.run_id, record.started_at, json.dumps(record.to_dict())))

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None:
        """Append samples and events in one transaction."""
        if not samples and not events:
            return
        try:
            with self.conn:
                self.conn.execute("BEGIN")
                if samples:
                    self.conn.executemany(_INSERT_SAMPLE, [(run_id, *_sample_row(s)) for s in samples])
                if events:
                    self.conn.executemany(
                        "INSERT INTO events (run_id, t, pid, kind, data) VALUES (?, ?, ?, ?, ?)",
                        [(run_id, e.t, e.pid, e.kind, json.dumps(e.data)) for e in events])
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to store {self.path}: {exc}") from None

    def import_run(self, record: RunRecord, samples: list[Sample], events: list[Event]) -> None:
        """Insert a whole run in one transaction: all of it or, on any error, nothing."""
        if self._query("SELECT 1 FROM runs WHERE run_id = ?", (record.run_id,)):
            raise StoreError(f"run {record.run_id} is already in store {self.path}")
        try:
            with self.conn:
                self.conn.execute("BEGIN")
                self.conn.execute("INSERT INTO runs (run_id, started_at, record) VALUES (?, ?, ?)",
                                  (record.run_id, record.started_at, json.dumps(record.to_dict())))
                self.conn.executemany(_INSERT_SAMPLE, [(record.run_id, *_sample_row(s)) for s in samples])
                self.conn.executemany("INSERT INTO events (run_id, t, pid, kind, data) VALUES (?, ?, ?, ?, ?)",
                                      [(record.run_id, e.t, e.pid, e.kind, json.dumps(e.data)) for e in events])
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to store {self.path}: {exc}") from None

    def delete_run(self, run_id: str) -> None:
        try:
            with self.conn:
                self.conn.execute("BEGIN")
                for table in ("samples", "events", "runs"):
                    self.conn.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot delete from store {self.path}: {exc}") from None

    # -- reading ---------------------------------------------------------------

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read store {self.path}: {exc}") from None

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        rows = self._query("SELECT record FROM runs ORDER BY started_at, run_id")
        return [_record(row[0], self.path) for row in rows]

    def run(self, ref: str) -> RunRecord:
        """The run named by an id, a unique id prefix, a name, or ``last``."""
        if ref in ("last", "latest", "-1"):
            rows = self._query("SELECT record FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not rows:
                raise UnknownRunError(f"no runs in {self.path} yet")
            return _record(rows[0][0], self.path)
        rows = self._query("SELECT record FROM runs WHERE run_id = ?", (ref,))
        if not rows:
            rows = self._query("SELECT record FROM runs WHERE run_id LIKE ? ESCAPE '\\'",
                               (ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))
        if not rows:
            rows = [r for r in self._query("SELECT record FROM runs ORDER BY started_at DESC")
                    if json.loads(r[0]).get("name") == ref][:1]
        if not rows:
            raise UnknownRunError(f"no run '{ref}' in {self.path} (see 'tensorgauge runs')")
        if len(rows) > 1:
            raise UnknownRunError(f"'{ref}' matches {len(rows)} runs; give more of the id")
        return _record(rows[0][0], self.path)

    def samples(self, run_id: str) -> list[Sample]:
        rows = self._query(f"SELECT {', '.join(_SAMPLE_COLUMNS)} FROM samples WHERE run_id = ? "
                           "ORDER BY t", (run_id,))
        # The JSON columns parsed in one call each: a one-hour run has 36,000 rows.
        cpu = iter(_json_column(row[-3] for row in rows))
        gpus = iter(_json_column(row[-2] for row in rows))
        return [_sample(row, next(cpu), next(gpus)) for row in rows]

    def events(self, run_id: str) -> list[Event]:
        rows = self._query("SELECT t, pid, kind, data FROM events WHERE run_id = ? ORDER BY rowid",
                           (run_id,))
        return [Event(t=t, pid=pid, kind=kind, data=data or {})
                for (t, pid, kind, _), data in zip(rows, _json_column(row[3] for row in rows))]

    def peaks(self) -> dict[str, tuple[int | None, int]]:
        """run_id -> (peak RSS bytes, number of samples), for listings."""
        rows = self._query("SELECT run_id, MAX(rss_bytes), COUNT(*) FROM samples GROUP BY run_id")
        return {run_id: (peak, count) for run_id, peak, count in rows}


def _record(text: str, path: Path) -> RunRecord:
    try:
        return RunRecord.from_dict(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"store {path} holds a damaged run record ({exc})") from None


def _sample_row(s: Sample) -> tuple:
    return (s.t, s.cpu_seconds, s.cores_busy, s.rss_bytes, s.threads, s.processes, s.read_bytes,
            s.write_bytes, s.uss_bytes, s.pss_bytes, s.mem_used_bytes, s.mem_available_bytes,
            json.dumps(s.cpu_percent) if s.cpu_percent is not None else None,
            json.dumps([g.to_dict() for g in s.gpus]) if s.gpus else None, s.runnable)


def _json_column(texts) -> list:
    """Each JSON text parsed (None for NULL), in one json.loads call."""
    texts = list(texts)
    present = [t for t in texts if t]
    try:
        values = iter(json.loads("[" + ",".join(present) + "]"))
    except ValueError as exc:
        raise StoreError(f"the store holds damaged JSON ({exc})") from None
    return [next(values) if t else None for t in texts]


def _sample(row: tuple, cpu_percent: list | None, gpus: list | None) -> Sample:
    if not gpus:
        return Sample(*row[:-3], cpu_percent, row[-1])
    try:
        readings = [GpuReading(**g) for g in gpus]
    except TypeError:  # written by another version: keep the fields this one knows
        readings = [GpuReading.from_dict(g) for g in gpus]
    return Sample(*row[:-3], cpu_percent, row[-1], readings)
