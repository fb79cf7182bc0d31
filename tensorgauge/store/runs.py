"""The run store, written while the job runs: SQLite in WAL mode by default
(:mod:`.sqlite`), or PostgreSQL for many workers (:mod:`.postgres`).

Every run lives in ``runs`` (one JSON record each), ``samples`` and ``events``
(one column per declared field, see :mod:`.schema`). Sample rows are moved into
compressed ``sample_chunks`` a minute at a time (:data:`CHUNK_SAMPLES`), and
the rest when the run ends: a day is ~11 MB, not ~460 MB. Each commit is one
transaction, so a crash of the job or the monitor keeps everything up to it; a
run whose monitor died stays marked incomplete (its rows are chunked the first
time it is analysed). Rows are decoded by column name, and a run record is
checked against its declaration when read.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tensorgauge.checks import ValidationError, check_record
from tensorgauge.errors import StoreError, StoreUnreachable, UnknownRunError
from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.store.location import check_location, default_store_path, is_url
from tensorgauge.store.postgres import PostgresBackend
from tensorgauge.store.schema import CHUNK_SAMPLES, EVENT_COLUMNS, SAMPLE_COLUMNS, Column
from tensorgauge.store.sqlite import SqliteBackend

if TYPE_CHECKING:  # numpy loads when samples are read or chunked, not to read a run's record or analysis
    from tensorgauge.series import SampleSeries

_SAMPLE_NAMES = ", ".join(c.name for c in SAMPLE_COLUMNS)
_EVENT_NAMES = ", ".join(c.name for c in EVENT_COLUMNS)
_INSERT_SAMPLE = f"INSERT INTO samples (run_id, {_SAMPLE_NAMES}) VALUES (?{', ?' * len(SAMPLE_COLUMNS)})"
_INSERT_EVENT = f"INSERT INTO events (run_id, {_EVENT_NAMES}) VALUES (?{', ?' * len(EVENT_COLUMNS)})"
_INSERT_CHUNK = ("INSERT INTO sample_chunks (run_id, first_t, last_t, count, rss_peak_bytes, data) "
                 "VALUES (?, ?, ?, ?, ?, ?)")
_UPSERT_RUN = ("INSERT INTO runs (run_id, started_at, record) VALUES (?, ?, ?) "
               "ON CONFLICT (run_id) DO UPDATE SET started_at = excluded.started_at, record = excluded.record")


class WindowTooLargeError(StoreError):
    """The samples asked for would decode to more than the caller allows."""

    def __init__(self, size: Any, max_bytes: int, start: float | None, end: float | None) -> None:
        from tensorgauge.units import format_bytes

        stretch = f" from {start or 0.0:g} s to {end:g} s" if end is not None else ""
        super().__init__(f"the samples{stretch} decode to more than {format_bytes(max_bytes)} (at least {size}, "
                         f"{format_bytes(size.bytes)}); ask for a shorter stretch of the run")


class Store:
    """Runs, samples and events in SQLite (a path) or PostgreSQL (a ``postgresql://`` URL)."""

    def __init__(self, backend):
        self.backend = backend
        self.notify: Callable[[str], None] | None = None  # told when a name picks one of several runs
        self.location = backend.location  # for messages (a URL without its password)
        self.data_dir = backend.data_dir  # where checkpoints and reports go beside the store
        self._rows: dict[str, int] = {}  # sample rows this store added per run and has not chunked yet

    @property
    def conn(self):
        return self.backend.conn

    @property
    def read_only(self) -> bool:
        """Opened to be read only (a read-only file, folder or mount): nothing can be recorded into it."""
        return bool(self.backend.read_only)

    @classmethod
    def open(cls, location: str | os.PathLike | None = None, create: bool = True) -> Store:
        """Open (and create, if ``create``) the store; any problem is a :class:`StoreError`.
        One thread at a time may use it (a monitor's writer thread while a run goes on). To record a run
        into PostgreSQL, :func:`.shipping.open_for_recording`."""
        location = str(location) if location is not None else str(default_store_path())
        check_location(location)
        if is_url(location):
            return cls(PostgresBackend(location, create))
        return cls(SqliteBackend(Path(location).expanduser(), create))

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _writing(self, what: str = "write to"):
        try:
            with self.backend.transaction():
                yield self.backend
        except self.backend.errors as exc:
            said = self.backend.scrub(exc) if hasattr(self.backend, "scrub") else str(exc)
            if getattr(self.backend, "connection_lost", lambda: False)():
                raise StoreUnreachable(f"store {self.location} stopped answering: {said}") from None
            raise StoreError(f"cannot {what} store {self.location}: {said}") from None

    @property
    def session_wait_seconds(self) -> float:
        """How long a :meth:`session` tries again a server that refuses it for now: not at all."""
        return 0.0

    def session(self) -> contextlib.AbstractContextManager:
        """A block of reads and writes on one connection (a recording's PostgreSQL store connects for each
        otherwise)."""
        session = getattr(self.backend, "session", None)
        return session(self.session_wait_seconds) if session is not None else contextlib.nullcontext()

    def reconnect(self) -> bool:
        """Connect again to a store whose server stopped answering; False while it still does not."""
        reconnect = getattr(self.backend, "reconnect", None)
        return bool(reconnect()) if reconnect is not None else False

    # -- writing ---------------------------------------------------------------

    def save_run(self, record: RunRecord, create: bool = True) -> bool:
        """Insert or replace the run's record; with ``create=False`` only replace it. False when
        there was nothing to replace: the run was removed (``tensorgauge rm``) while it was recorded."""
        with self._writing() as db:
            if create:
                db.execute(_UPSERT_RUN, (record.run_id, record.started_at, json.dumps(record.to_dict())))
                saved = True
            else:
                saved = db.execute("UPDATE runs SET started_at = ?, record = ? WHERE run_id = ?",
                                   (record.started_at, json.dumps(record.to_dict()), record.run_id)) > 0
        if saved and record.complete:  # the run has ended: its last rows join the chunks
            self.compact(record.run_id)
        return saved

    def add(self, run_id: str, samples: list[Sample], events: list[Event]) -> None:
        """Append samples and events in one transaction."""
        if not samples and not events:
            return
        with self._writing() as db:
            if samples:
                db.executemany(_INSERT_SAMPLE, [(run_id, *_row(SAMPLE_COLUMNS, s)) for s in samples])
            if events:
                db.executemany(_INSERT_EVENT, [(run_id, *_row(EVENT_COLUMNS, e)) for e in events])
        if samples:
            self._rows[run_id] = self._rows.get(run_id, 0) + len(samples)
            if self._rows[run_id] >= CHUNK_SAMPLES:
                self.compact(run_id)

    def compact(self, run_id: str) -> None:
        """Move the run's sample rows into compressed chunks of :data:`CHUNK_SAMPLES`, in one transaction."""
        self._rows[run_id] = 0
        if not self.backend.chunked or self.backend.read_only:
            return
        from tensorgauge.series import SampleSeries

        with self._writing() as db:
            rows = db.query(f"SELECT {_SAMPLE_NAMES} FROM samples WHERE run_id = ? ORDER BY t", (run_id,))
            if not rows:
                return
            db.executemany(_INSERT_CHUNK, _chunk_rows(run_id, SampleSeries.from_samples(_samples(rows, self.location))))
            db.execute("DELETE FROM samples WHERE run_id = ?", (run_id,))

    def import_run(self, record: RunRecord, samples: list[Sample] | SampleSeries, events: list[Event],
                   analysis: tuple[str, dict] | None = None, chunk_rows: list[tuple] | None = None) -> None:
        """Insert a whole run in one transaction: all of it or, on any error, nothing. ``chunk_rows``: the
        samples already as chunks (first t, last t, count, RSS peak, blob), stored as they are."""
        from tensorgauge.series import SampleSeries

        if self._query("SELECT 1 FROM runs WHERE run_id = ?", (record.run_id,)):
            raise StoreError(f"run {record.run_id} is already in store {self.location}")
        series = samples if isinstance(samples, SampleSeries) else SampleSeries.from_samples(samples)
        with self._writing() as db:
            db.execute("INSERT INTO runs (run_id, started_at, record) VALUES (?, ?, ?)",
                       (record.run_id, record.started_at, json.dumps(record.to_dict())))
            if self.backend.chunked:
                rows = [(record.run_id, *row) for row in chunk_rows] if chunk_rows is not None else \
                    _chunk_rows(record.run_id, series)
                db.executemany(_INSERT_CHUNK, rows)
            else:
                db.executemany(_INSERT_SAMPLE, [(record.run_id, *_row(SAMPLE_COLUMNS, s))
                                                for s in series.to_samples()])
            db.executemany(_INSERT_EVENT, [(record.run_id, *_row(EVENT_COLUMNS, e)) for e in events])
            if analysis is not None and self.backend.chunked:
                db.execute("INSERT INTO analyses (run_id, key, doc) VALUES (?, ?, ?)",
                           (record.run_id, analysis[0], json.dumps(analysis[1])))

    def save_analysis(self, run_id: str, key: str, doc: dict) -> None:
        """Keep a finished run's analysis (``key``: what it was computed from), and chunk its rows."""
        if not self.backend.chunked or self.backend.read_only:
            return
        with self.session():
            with self._writing() as db:
                db.execute("DELETE FROM analyses WHERE run_id = ?", (run_id,))
                db.execute("INSERT INTO analyses (run_id, key, doc) VALUES (?, ?, ?)", (run_id, key, json.dumps(doc)))
            self.compact(run_id)

    def quiet_seconds(self, record: RunRecord) -> float | None:
        """How long ago (wall-clock seconds) the run stored its last sample (or started, before its first);
        None for a run that has ended, or whose start cannot be read."""
        import datetime
        import time

        if record.complete:
            return None
        try:
            started = datetime.datetime.fromisoformat(record.started_at).timestamp()
        except (ValueError, TypeError, OverflowError):
            return None
        queries = ["SELECT MAX(t) FROM samples WHERE run_id = ?"]
        if self.backend.chunked:
            queries.append("SELECT MAX(last_t) FROM sample_chunks WHERE run_id = ?")
        last = max([0.0] + [float(row[0][0]) for row in (self._query(q, (record.run_id,)) for q in queries)
                            if row and row[0][0] is not None])
        return time.time() - (started + last)

    def delete_run(self, run_id: str) -> None:
        self.delete_runs([run_id])

    def delete_runs(self, run_ids: list[str]) -> None:
        """Remove these runs (their record, samples, events, analyses), all in one transaction."""
        tables = ["samples", "events", "runs"] + (["sample_chunks", "analyses"] if self.backend.chunked else [])
        with self._writing("delete from") as db:
            if getattr(db, "event_order", "") == "id" and db.query("SELECT to_regclass('tensorgauge_shipped')")[0][0]:
                tables.append("tensorgauge_shipped")  # PostgreSQL: what the spools of these runs shipped
            for table in tables:
                for part, marks in _id_parts(run_ids):
                    db.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", part)

    # -- reading ---------------------------------------------------------------

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            return self.backend.query(sql, args)
        except self.backend.errors as exc:
            raise StoreError(f"cannot read store {self.location}: {exc}") from None

    def runs(self, damaged: list[tuple[str, str]] | None = None) -> list[RunRecord]:
        """Every run, oldest first. A damaged record is skipped (one row must not hide the others) and,
        with ``damaged``, named there: (run id, what is wrong)."""
        out = []
        for run_id, text in self._query("SELECT run_id, record FROM runs ORDER BY started_at, run_id"):
            try:
                out.append(_record(text, self.location))
            except StoreError as exc:
                if damaged is not None:
                    damaged.append((str(run_id), str(exc)))
        return out

    def run_id_of(self, ref: str) -> str:
        """The id of the run named by an exact id or a unique id prefix, without reading its record (a
        damaged one can still be removed); other references (a name, ``last``) through :meth:`run`."""
        if not _is_text(ref):  # bytes of no encoding (a name from a shell's argv): no id, maybe a name
            return self.run(ref).run_id
        ids = [row[0] for row in self._query("SELECT run_id FROM runs WHERE run_id = ?", (ref,))]
        if not ids:
            ids = [row[0] for row in self._query("SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\'",
                                                 (_like_prefix(ref),))]
        if len(ids) == 1:
            return str(ids[0])
        return self.run(ref).run_id

    def run(self, ref: str) -> RunRecord:
        """The run named by an id, a unique id prefix, a name, or ``last``."""
        if ref in ("last", "latest", "-1"):
            rows = self._query("SELECT record FROM runs ORDER BY started_at DESC, run_id DESC LIMIT 1")
            if not rows:
                raise UnknownRunError(f"no runs in {self.location} yet")
            return _record(rows[0][0], self.location)
        rows = self._query("SELECT record FROM runs WHERE run_id = ?", (ref,)) if _is_text(ref) else []
        if not rows and _is_text(ref):
            rows = self._query("SELECT record FROM runs WHERE run_id LIKE ? ESCAPE '\\'", (_like_prefix(ref),))
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

    def series(self, run_id: str, start: float | None = None, end: float | None = None,
               max_bytes: int | None = None) -> SampleSeries:
        """The run's samples (those with ``start <= t <= end``) as columns, at full resolution. With
        ``max_bytes``, :class:`WindowTooLargeError` when the chunks they lie in decode to more (their
        headers are read first: nothing is decoded then)."""
        import numpy as np

        from tensorgauge.series import SampleSeries
        from tensorgauge.store import chunks

        window = ""
        args: list[Any] = [run_id]
        if start is not None:
            window, args = window + " AND last_t >= ?", args + [start]
        if end is not None:
            window, args = window + " AND first_t <= ?", args + [end]
        parts = []
        if self.backend.chunked:
            found = self._query(f"SELECT data FROM sample_chunks WHERE run_id = ?{window} ORDER BY first_t",
                                tuple(args))
            try:
                blobs = [bytes(b) for (b,) in found]
                del found
                if max_bytes is not None:
                    size = chunks.DecodedSize()
                    for blob in blobs:
                        if size.add(chunks.header(blob)) > max_bytes:
                            raise WindowTooLargeError(size, max_bytes, start, end)
                for i, blob in enumerate(blobs):
                    blobs[i] = b""  # decoded: let go
                    parts.append(chunks.decode(blob))
            except WindowTooLargeError:
                raise
            except Exception as exc:  # zstd's error, a truncated blob: one message, not a traceback
                raise StoreError(f"store {self.location} holds a damaged sample chunk "
                                 f"({type(exc).__name__}: {exc})") from None
        rows = self._query(f"SELECT {_SAMPLE_NAMES} FROM samples WHERE run_id = ?"
                           + (" AND t >= ?" if start is not None else "") + (" AND t <= ?" if end is not None else "")
                           + " ORDER BY t", tuple(a for a in (run_id, start, end) if a is not None))
        parts.append(SampleSeries.from_samples(_samples(rows, self.location)))
        series = SampleSeries.concat(parts)
        if len(series) > 1 and np.any(np.diff(series.t) < 0):
            series = series.take(np.argsort(series.t, kind="stable"))
        if start is not None or end is not None:
            series = series.between(-np.inf if start is None else start, np.inf if end is None else end)
        return series

    def samples(self, run_id: str, start: float | None = None, end: float | None = None,
                max_bytes: int | None = None) -> list[Sample]:
        """The run's samples as records: for a window, or a short run (a day is 864,000 of them)."""
        return self.series(run_id, start, end, max_bytes).to_samples()

    def sample_blobs(self, run_id: str) -> list[bytes]:
        """The run's samples as compressed chunks: those stored, and its rows (not yet chunked) encoded."""
        from tensorgauge.series import SampleSeries
        from tensorgauge.store import chunks

        blobs = [bytes(b) if isinstance(b, (bytes, bytearray, memoryview)) else b""  # TEXT: damaged
                 for (b,) in self._query("SELECT data FROM sample_chunks WHERE run_id = ? ORDER BY first_t",
                                         (run_id,))] if self.backend.chunked else []
        rows = self._query(f"SELECT {_SAMPLE_NAMES} FROM samples WHERE run_id = ? ORDER BY t", (run_id,))
        return blobs + [row[-1] for row in chunks.split(SampleSeries.from_samples(_samples(rows, self.location)))]

    def sample_count(self, run_id: str) -> int:
        return self.peaks(run_id).get(run_id, (None, 0))[1]

    def analysis(self, run_id: str) -> tuple[str, dict] | None:
        """(key, document) of the run's stored analysis, or None."""
        if not self.backend.chunked:
            return None
        rows = self._query("SELECT key, doc FROM analyses WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        try:
            return rows[0][0], json.loads(rows[0][1])
        except ValueError:
            return None  # damaged: analysed again from the data

    def analyses(self, run_ids: list[str]) -> dict[str, tuple[str, dict]]:
        """run id -> (key, document) of the stored analyses of these runs, read a few hundred runs a query
        (a damaged document is left out: that run is analysed again from its data)."""
        out: dict[str, tuple[str, dict]] = {}
        if not self.backend.chunked:
            return out
        for part, marks in _id_parts(run_ids):
            for run_id, key, doc in self._query(f"SELECT run_id, key, doc FROM analyses WHERE run_id IN ({marks})",
                                                part):
                try:
                    out[str(run_id)] = (key, json.loads(doc))
                except ValueError:
                    pass
        return out

    def events_of_kind(self, run_ids: list[str], kind: str) -> dict[str, list[Event]]:
        """run id -> its events of ``kind`` in the order written, for these runs, a few hundred runs a query."""
        at = {c.name: i for i, c in enumerate(EVENT_COLUMNS)}
        out: dict[str, list[Event]] = {run_id: [] for run_id in run_ids}
        for part, marks in _id_parts(run_ids):
            rows = self._query(f"SELECT run_id, {_EVENT_NAMES} FROM events WHERE run_id IN ({marks}) AND kind = ? "
                               f"ORDER BY {self.backend.event_order}", (*part, kind))
            payloads = _json_column([row[1 + at["data"]] for row in rows])
            for row, payload in zip(rows, payloads):
                out.setdefault(str(row[0]), []).append(Event(row[1 + at["t"]], row[1 + at["pid"]],
                                                             row[1 + at["kind"]], payload or {}))
        return out

    def events(self, run_id: str, step_digests: bool = True) -> list[Event]:
        """The run's events in the order written; without ``step_digest`` ones unless ``step_digests``."""
        skip = "" if step_digests else f" AND kind <> '{Kind.STEP_DIGEST}'"
        rows = self._query(f"SELECT {_EVENT_NAMES} FROM events WHERE run_id = ?{skip} "
                           f"ORDER BY {self.backend.event_order}", (run_id,))
        # Built straight from the rows (a run with 100,000 phases has 200,000 events), by column name.
        at = {c.name: i for i, c in enumerate(EVENT_COLUMNS)}
        t, pid, kind, data = at["t"], at["pid"], at["kind"], at["data"]
        payloads = _json_column([row[data] for row in rows])
        return [Event(row[t], row[pid], row[kind], payload or {}) for row, payload in zip(rows, payloads)]

    def peaks(self, run_id: str | None = None) -> dict[str, tuple[int | None, int]]:
        """run_id -> (peak RSS bytes, number of samples), for listings (of one run with ``run_id``)."""
        where, args = (" WHERE run_id = ?", (run_id,)) if run_id is not None else ("", ())
        out: dict[str, tuple[int | None, int]] = {}
        queries = ["SELECT run_id, MAX(rss_bytes), COUNT(*) FROM samples{} GROUP BY run_id"]
        if self.backend.chunked:
            queries.append("SELECT run_id, MAX(rss_peak_bytes), SUM(count) FROM sample_chunks{} GROUP BY run_id")
        for sql in queries:
            for rid, peak, count in self._query(sql.format(where), args):
                old_peak, old_count = out.get(rid, (None, 0))
                peaks = [p for p in (old_peak, peak) if p is not None]
                out[rid] = (max(peaks) if peaks else None, old_count + int(count or 0))
        return out


_IDS_A_QUERY = 500  # run ids in one IN (...) list: well under SQLite's and PostgreSQL's bound on parameters


def _id_parts(run_ids: list[str]) -> list[tuple[tuple[str, ...], str]]:
    """``run_ids`` in parts of :data:`_IDS_A_QUERY`: (the part, its ``?, ?, ...`` placeholders)."""
    parts = [tuple(run_ids[i:i + _IDS_A_QUERY]) for i in range(0, len(run_ids), _IDS_A_QUERY)]
    return [(part, ", ".join("?" * len(part))) for part in parts]


def _samples(rows: list[tuple], location: str) -> list[Sample]:
    """Sample rows as records."""
    values = _decode(SAMPLE_COLUMNS, rows)
    try:
        for v in values:
            if v["gpus"]:
                v["gpus"] = [GpuReading.from_dict(g) for g in v["gpus"]]
        return [Sample(**v) for v in values]
    except (TypeError, AttributeError) as exc:
        raise StoreError(f"store {location} holds a damaged sample ({exc})") from None


def _chunk_rows(run_id: str, series: SampleSeries) -> list[tuple]:
    """``sample_chunks`` rows of :data:`~.schema.CHUNK_SAMPLES` samples each."""
    from tensorgauge.store import chunks

    return [(run_id, *row) for row in chunks.split(series)]


def _is_text(ref: str) -> bool:
    """``ref`` can be sent to the database: no lone surrogates (undecodable bytes in ``sys.argv``)."""
    try:
        ref.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _like_prefix(ref: str) -> str:
    """A LIKE pattern (escape character ``\\``) for the ids that start with ``ref``."""
    return ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _record(text: str, location: str) -> RunRecord:
    try:
        return RunRecord.from_dict(check_record(RunRecord, json.loads(text), "run"))
    except (ValueError, TypeError, ValidationError) as exc:
        run_id = _id_in(text)
        raise StoreError(f"store {location} holds a damaged run record{f' {run_id}' if run_id else ''} ({exc})"
                         + (f"; 'tensorgauge rm {run_id}' removes it" if run_id else "")) from None


def _id_in(text: str) -> str | None:
    try:
        run_id = json.loads(text).get("run_id")
    except (ValueError, AttributeError, TypeError):
        return None
    return run_id if isinstance(run_id, str) else None


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

