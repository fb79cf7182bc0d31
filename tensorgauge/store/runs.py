"""The run store, written while the job runs: SQLite in WAL mode by default
(:mod:`.sqlite`), or PostgreSQL for many workers (:mod:`.postgres`).

Every run lives in three tables: ``runs`` (one JSON record each), ``samples``
and ``events`` (one column per declared field, see :mod:`.schema`). Each commit
is one transaction, so a crash of the job or the monitor keeps everything up
to it; a run whose monitor died stays marked incomplete. Rows are decoded by
column name, and a run record is checked against its declaration when read.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorgauge.checks import ValidationError, check_record
from tensorgauge.errors import StoreError, UnknownRunError
from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.store.location import default_store_path, is_url
from tensorgauge.store.postgres import PostgresBackend
from tensorgauge.store.schema import EVENT_COLUMNS, SAMPLE_COLUMNS, Column
from tensorgauge.store.sqlite import SqliteBackend

_SAMPLE_NAMES = ", ".join(c.name for c in SAMPLE_COLUMNS)
_EVENT_NAMES = ", ".join(c.name for c in EVENT_COLUMNS)
_INSERT_SAMPLE = f"INSERT INTO samples (run_id, {_SAMPLE_NAMES}) VALUES (?{', ?' * len(SAMPLE_COLUMNS)})"
_INSERT_EVENT = f"INSERT INTO events (run_id, {_EVENT_NAMES}) VALUES (?{', ?' * len(EVENT_COLUMNS)})"
_UPSERT_RUN = ("INSERT INTO runs (run_id, started_at, record) VALUES (?, ?, ?) "
               "ON CONFLICT (run_id) DO UPDATE SET started_at = excluded.started_at, record = excluded.record")



class Store:
    """Runs, samples and events in SQLite (a path) or PostgreSQL (a ``postgresql://`` URL)."""

    def __init__(self, backend):
        self.backend = backend
        self.notify: Callable[[str], None] | None = None  # told when a name picks one of several runs
        self.location = backend.location  # for messages (a URL without its password)
        self.data_dir = backend.data_dir  # where checkpoints and reports go beside the store

    @property
    def conn(self):
        return self.backend.conn

    @classmethod
    def open(cls, location: str | os.PathLike | None = None, create: bool = True) -> Store:
        """Open (and create, if ``create``) the store; any problem is a :class:`StoreError`.
        One thread at a time may use it (a monitor's writer thread while a run goes on)."""
        location = str(location) if location is not None else str(default_store_path())
        if is_url(location):
            return cls(PostgresBackend(location, create))
        return cls(SqliteBackend(Path(location).expanduser(), create))

    def close(self) -> None:
        self.backend.close()

    @contextlib.contextmanager
    def _writing(self, what: str = "write to"):
        try:
            with self.backend.transaction():
                yield self.backend
        except self.backend.errors as exc:
            raise StoreError(f"cannot {what} store {self.location}: {exc}") from None

    # -- writing ---------------------------------------------------------------

    def save_run(self, record: RunRecord, create: bool = True) -> bool:
        """Insert or replace the run's record; with ``create=False`` only replace it. False when
        there was nothing to replace: the run was removed (``tensorgauge rm``) while it was recorded."""
        with self._writing() as db:
            if create:
                db.execute(_UPSERT_RUN, (record.run_id, record.started_at, json.dumps(record.to_dict())))
                return True
            return db.execute("UPDATE runs SET started_at = ?, record = ? WHERE run_id = ?",
                              (record.started_at, json.dumps(record.to_dict()), record.run_id)) > 0

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None:
        """Append samples and events in one transaction."""
        if not samples and not events:
            return
        with self._writing() as db:
            if samples:
                db.executemany(_INSERT_SAMPLE, [(run_id, *_row(SAMPLE_COLUMNS, s)) for s in samples])
            if events:
                db.executemany(_INSERT_EVENT, [(run_id, *_row(EVENT_COLUMNS, e)) for e in events])

    def import_run(self, record: RunRecord, samples: list[Sample], events: list[Event]) -> None:
        """Insert a whole run in one transaction: all of it or, on any error, nothing."""
        if self._query("SELECT 1 FROM runs WHERE run_id = ?", (record.run_id,)):
            raise StoreError(f"run {record.run_id} is already in store {self.location}")
        with self._writing() as db:
            db.execute("INSERT INTO runs (run_id, started_at, record) VALUES (?, ?, ?)",
                       (record.run_id, record.started_at, json.dumps(record.to_dict())))
            db.executemany(_INSERT_SAMPLE, [(record.run_id, *_row(SAMPLE_COLUMNS, s)) for s in samples])
            db.executemany(_INSERT_EVENT, [(record.run_id, *_row(EVENT_COLUMNS, e)) for e in events])

    def delete_run(self, run_id: str) -> None:
        with self._writing("delete from") as db:
            for table in ("samples", "events", "runs"):
                db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))

    # -- reading ---------------------------------------------------------------

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self.backend.query(sql, args)
        except self.backend.errors as exc:
            raise StoreError(f"cannot read store {self.location}: {exc}") from None

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first."""
        rows = self._query("SELECT record FROM runs ORDER BY started_at, run_id")
        return [_record(row[0], self.location) for row in rows]

    def run(self, ref: str) -> RunRecord:
        """The run named by an id, a unique id prefix, a name, or ``last``."""
        if ref in ("last", "latest", "-1"):
            rows = self._query("SELECT record FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not rows:
                raise UnknownRunError(f"no runs in {self.location} yet")
            return _record(rows[0][0], self.location)
        rows = self._query("SELECT record FROM runs WHERE run_id = ?", (ref,))
        if not rows:
            rows = self._query("SELECT record FROM runs WHERE run_id LIKE ? ESCAPE '\\'",
                               (ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",))
        if not rows:
            named = [r for r in self._query("SELECT record FROM runs ORDER BY started_at DESC")
                     if json.loads(r[0]).get("name") == ref]
            rows = named[:1]
            if len(named) > 1 and self.notify is not None:
                newest = _record(rows[0][0], self.location).run_id
                self.notify(f"{len(named)} runs are named '{ref}': this is the newest, {newest} "
                            "(give an id for another; see 'tensorgauge runs')")
        if not rows:
            raise UnknownRunError(f"no run '{ref}' in {self.location} (see 'tensorgauge runs')")
        if len(rows) > 1:
            raise UnknownRunError(f"'{ref}' matches {len(rows)} runs; give more of the id")
        return _record(rows[0][0], self.location)

    def samples(self, run_id: str) -> list[Sample]:
        rows = self._query(f"SELECT {_SAMPLE_NAMES} FROM samples WHERE run_id = ? ORDER BY t", (run_id,))
        values = _decode(SAMPLE_COLUMNS, rows)
        try:
            for v in values:
                if v["gpus"]:
                    v["gpus"] = [GpuReading.from_dict(g) for g in v["gpus"]]
            samples = [Sample(**v) for v in values]
        except (TypeError, AttributeError) as exc:
            raise StoreError(f"store {self.location} holds a damaged sample ({exc})") from None
        return samples

    def events(self, run_id: str) -> list[Event]:
        rows = self._query(f"SELECT {_EVENT_NAMES} FROM events WHERE run_id = ? "
                           f"ORDER BY {self.backend.event_order}", (run_id,))
        # Built straight from the rows (a run with 100,000 phases has 200,000 events), by column name.
        at = {c.name: i for i, c in enumerate(EVENT_COLUMNS)}
        t, pid, kind, data = at["t"], at["pid"], at["kind"], at["data"]
        payloads = _json_column([row[data] for row in rows])
        return [Event(row[t], row[pid], row[kind], payload or {}) for row, payload in zip(rows, payloads)]

    def peaks(self) -> dict[str, tuple[int | None, int]]:
        """run_id -> (peak RSS bytes, number of samples), for listings."""
        rows = self._query("SELECT run_id, MAX(rss_bytes), COUNT(*) FROM samples GROUP BY run_id")
        return {run_id: (peak, count) for run_id, peak, count in rows}


def _record(text: str, location: str) -> RunRecord:
    try:
        return RunRecord.from_dict(check_record(RunRecord, json.loads(text), "run"))
    except (ValueError, TypeError, ValidationError) as exc:
        raise StoreError(f"store {location} holds a damaged run record ({exc})") from None


def _row(columns: tuple[Column, ...], record: Any) -> tuple:
    """A record's values in column order, lists and objects as JSON (an empty list as NULL)."""
    out = []
    for c in columns:
        value = getattr(record, c.name)
        if c.is_json:
            if c.kind == "records":
                value = [v.to_dict() for v in value] or None
            value = json.dumps(value) if value is not None else None
        out.append(value)
    return tuple(out)


def _decode(columns: tuple[Column, ...], rows: list[tuple]) -> list[dict[str, Any]]:
    """Rows as {column name: value}, each JSON column parsed in one json.loads call
    (a one-hour run has 36,000 rows)."""
    values = [dict(zip((c.name for c in columns), row)) for row in rows]
    for i, c in enumerate(columns):
        if c.is_json:
            parsed = _json_column([row[i] for row in rows])
            empty: list | None = [] if c.kind == "records" else None
            for value, p in zip(values, parsed):
                value[c.name] = p if p is not None else empty
    return values


def _json_column(texts: list) -> list:
    """Each JSON text parsed (None for NULL), in one json.loads call."""
    if all(texts):
        present = texts
        try:
            return json.loads("[" + ",".join(present) + "]")
        except ValueError as exc:
            raise StoreError(f"the store holds damaged JSON ({exc})") from None
    present = [t for t in texts if t]
    try:
        parsed = iter(json.loads("[" + ",".join(present) + "]"))
    except ValueError as exc:
        raise StoreError(f"the store holds damaged JSON ({exc})") from None
    return [next(parsed) if t else None for t in texts]
