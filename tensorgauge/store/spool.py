"""A run's data waiting for its PostgreSQL store: a local SQLite file, one row per batch in the order
written, and the run's latest record.

Crash-safe (each batch is its own SQLite transaction: a killed monitor keeps all it wrote) and bounded
(:data:`MAX_BYTES`, ``$TENSORGAUGE_SPOOL_MAX_BYTES``: past it a batch is refused, and counted as lost by the
writer). It lives in the user's data folder, ``spool/`` (private, mode 0700), named by the run's id; the
store it is for is kept by location without its password. A batch leaves the spool only once the store
has committed it (see :mod:`.shipping`).

Where the disk refuses a run's spool (full, or its folder cannot be made), what it refuses is held in the
monitor's memory instead (:data:`MEMORY_MAX_BYTES` at most), numbered and shipped in the same order as
the rest: while the store answers the run is kept whole, though what is in memory dies with the monitor.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import zlib
from pathlib import Path
from typing import NamedTuple

from tensorgauge.errors import StoreError
from tensorgauge.store.private import UntrustedPathError, private_folder

MAX_BYTES = 256 << 20  # ~1 day of one worker's samples at 10 Hz: past it, a batch is lost, not the disk
SPOOL_ENV = "TENSORGAUGE_SPOOL_MAX_BYTES"
MEMORY_MAX_BYTES = 64 << 20  # what a spool holds in memory, compressed, where its disk refuses (hours at 10 Hz)
EMPTY_SPOOL_SECONDS = 60.0  # a spool file holding nothing, untouched this long, is no live monitor's: removed
_SCHEMA = ("CREATE TABLE IF NOT EXISTS batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, samples INTEGER NOT NULL, "
           "events INTEGER NOT NULL, body BLOB NOT NULL);"
           "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
_SET_META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


def spool_folder(data_dir: Path) -> Path:
    """``DATA_DIR/spool``, made private where missing."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return private_folder(data_dir, ("spool",), "the spool folder",
                              "another user could read or change the runs waiting there; remove it")
    except UntrustedPathError as exc:
        raise StoreError(str(exc)) from None
    except OSError as exc:
        raise StoreError(f"cannot make the spool folder {data_dir / 'spool'}: {exc.strerror or exc}") from None


class HeldBatch(NamedTuple):
    """A batch the disk refused, in memory until the store has it."""

    seq: int
    samples: int
    events: int
    body: bytes


def _open(path: Path, meta: dict[str, str | None]) -> sqlite3.Connection:
    """The spool file at ``path`` (made where missing, never through a link), its tables and ``meta``; a
    file this made is removed again where the disk refuses it."""
    made = not os.path.lexists(path)
    conn = None
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(_SCHEMA)
        for key, value in meta.items():
            if value is not None:
                conn.execute(_SET_META, (key, value))
        return conn
    except (sqlite3.Error, OSError) as exc:
        if conn is not None:
            conn.close()
        if made:
            remove_spool(path)
        raise StoreError(f"cannot keep the run's data in {path}: {exc}") from None


def remove_spool(path: Path) -> None:
    """The spool file and its journal removed."""
    for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            part.unlink()
        except OSError:  # not there, or the folder refuses: nothing of it is read again without its tables
            pass


class Spool:
    """Batches of (sample rows, event rows) for one run, and its latest record, in a local file; with
    ``hold_when_refused`` (a run's own spool), what the disk refuses is held in memory (``refused`` says
    why), and ``path`` may be None (no folder for it: all of it in memory)."""

    def __init__(self, path: Path | None, store_location: str | None = None, run_id: str | None = None,
                 max_bytes: int | None = None, hold_when_refused: bool = False, refused: str | None = None):
        self.path = path
        self.max_bytes = max_bytes or int(os.environ.get(SPOOL_ENV) or MAX_BYTES)
        self.conn: sqlite3.Connection | None = None
        self.refused = refused  # why the disk last refused a write of this spool
        self._held: list[HeldBatch] = []
        self._held_record: str | None = None  # the latest record, where the disk refused it
        self._shipped_seq = 0  # batches up to this one are in the store (a full disk may refuse their delete)
        self._lock = threading.Lock()  # the writer appends while the shipper reads: one at a time
        if path is not None:
            try:
                self.conn = _open(path, {"store": store_location, "run_id": run_id})
            except StoreError as exc:
                if not hold_when_refused:
                    raise
                self.refused = str(exc)
        self._next_seq = self._last_seq() + 1

    @property
    def on_disk(self) -> bool:
        return self.conn is not None

    @property
    def record_held(self) -> bool:
        """The latest record is in memory only (the disk refused it)."""
        return self._held_record is not None

    def _last_seq(self) -> int:
        if self.conn is None:
            return 0
        return int(self._read("SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'batches'), 0), "
                              "(SELECT COALESCE(MAX(seq), 0) FROM batches))")[0][0])

    def _write(self, sql: str, args: tuple) -> bool:
        """``sql`` on the file: False (and ``refused`` said) where the disk refuses it."""
        if self.conn is None:
            return False
        try:
            self.conn.execute(sql, args)
            return True
        except sqlite3.Error as exc:
            self.refused = f"cannot keep the run's data in {self.path}: {exc}"
            return False

    def _read(self, sql: str, args: tuple = ()) -> list[tuple]:
        """Rows of the file (none where it is in memory only); :class:`StoreError` where the disk fails."""
        if self.conn is None:
            return []
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the run's data in {self.path}: {exc}") from None

    def meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def size_bytes(self) -> int:
        if self.conn is None or self.path is None:
            return 0
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def held_bytes(self) -> int:
        return sum(len(batch.body) for batch in self._held)

    def append(self, sample_rows: list[tuple], event_rows: list[tuple]) -> None:
        """One batch, durable when this returns, or held in memory where the disk refuses it (see
        ``refused``); :class:`StoreError` when the spool is full."""
        if self.size_bytes() > self.max_bytes or self.held_bytes() > min(self.max_bytes, MEMORY_MAX_BYTES):
            where = self.path if self.conn is not None else "in memory (the disk refused it)"
            raise StoreError(f"the store did not answer and the run's spool {where} is full "
                             f"({self.max_bytes >> 20} MiB): samples are being lost")
        body = zlib.compress(json.dumps([sample_rows, event_rows]).encode(), 1)
        with self._lock:
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            if not self._write("INSERT INTO batches (seq, samples, events, body) VALUES (?, ?, ?, ?)",
                               (seq, len(sample_rows), len(event_rows), body)):
                self._held.append(HeldBatch(seq, len(sample_rows), len(event_rows), body))

    def set_record(self, record: dict) -> None:
        text = json.dumps(record)
        with self._lock:
            self._held_record = None if self._write(_SET_META, ("record", text)) else text

    def record(self) -> dict | None:
        with self._lock:
            text = self._held_record or self.meta("record")
        return json.loads(text) if text else None

    def pending(self, limit: int) -> list[tuple[int, list[tuple], list[tuple]]]:
        """The oldest ``limit`` batches, from the file and from memory: (seq, sample rows, event rows)."""
        with self._lock:
            rows = self._read("SELECT seq, body FROM batches WHERE seq > ? ORDER BY seq LIMIT ?",
                              (self._shipped_seq, limit))
            rows += [(batch.seq, batch.body) for batch in self._held[:limit]]
        out = []
        for seq, body in sorted(rows, key=lambda row: row[0])[:limit]:
            samples, events = json.loads(zlib.decompress(body))
            out.append((seq, [tuple(r) for r in samples], [tuple(r) for r in events]))
        return out

    def waiting(self) -> tuple[int, int]:
        """(batches, samples) not yet shipped."""
        with self._lock:
            batches, samples = (self._read("SELECT COUNT(*), COALESCE(SUM(samples), 0) FROM batches WHERE seq > ?",
                                           (self._shipped_seq,)) or [(0, 0)])[0]
            return int(batches) + len(self._held), int(samples) + sum(batch.samples for batch in self._held)

    def held(self) -> tuple[int, int]:
        """(samples, events) held in memory, not yet shipped: lost with this process."""
        with self._lock:
            return sum(b.samples for b in self._held), sum(b.events for b in self._held)

    def shipped(self, seq: int) -> None:
        """The store has committed every batch up to ``seq``: they leave the spool."""
        with self._lock:
            self._held = [batch for batch in self._held if batch.seq > seq]
            self._shipped_seq = max(self._shipped_seq, seq)
            if self.conn is not None:
                try:
                    self.conn.execute("DELETE FROM batches WHERE seq <= ?", (seq,))
                except sqlite3.Error:  # a full disk refuses a delete too: skipped here, and by the store
                    pass

    def close(self, remove: bool = False) -> None:
        """Close; with ``remove``, delete the file (everything in it was shipped)."""
        if self.conn is not None:
            self.conn.close()
            if remove and self.path is not None:
                remove_spool(self.path)


class _Contents(NamedTuple):
    meta: dict[str, str]
    samples: int
    batches: int
    has_record: bool


def _contents(path: Path) -> _Contents | None:
    """What a spool file holds (read only); None where it is no spool (damaged, or never given its tables)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('store', 'run_id')").fetchall())
            samples, batches = conn.execute("SELECT COALESCE(SUM(samples), 0), COUNT(*) FROM batches").fetchone()
            has_record = conn.execute("SELECT 1 FROM meta WHERE key = 'record'").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return _Contents(meta, int(samples), int(batches), has_record)


def waiting_spools(data_dir: Path, store_location: str) -> list[tuple[str, Path, int]]:
    """(run id, spool file, samples waiting) of this machine's spools for the store at ``store_location``."""
    folder = data_dir / "spool"
    out = []
    for path in sorted(folder.glob("*.db")) if folder.is_dir() else ():
        held = _contents(path)
        if held is not None and held.meta.get("store") == store_location and (held.batches or held.has_record):
            out.append((held.meta.get("run_id", path.stem), path, held.samples))
    return out


def empty_spools(data_dir: Path, now: float | None = None) -> list[Path]:
    """Spool files that hold nothing to ship (no batch, no record: their monitor was killed as it made them),
    untouched for :data:`EMPTY_SPOOL_SECONDS`."""
    import time

    folder = data_dir / "spool"
    out = []
    for path in sorted(folder.glob("*.db")) if folder.is_dir() else ():
        try:
            info = path.lstat()
        except OSError:
            continue
        if (now or time.time()) - info.st_mtime < EMPTY_SPOOL_SECONDS:
            continue
        held = _contents(path) if info.st_size else _Contents({}, 0, 0, False)
        if held is not None and not (held.batches or held.has_record):
            out.append(path)
    return out


def waiting_lines(location: str, run_id: str | None = None) -> list[str]:
    """What waits on this machine to reach the store at ``location`` (of one run with ``run_id``), one line
    per run, for ``runs`` and ``show``."""
    import socket

    from tensorgauge.store.location import local_data_dir
    from tensorgauge.store.postgres import redact

    host = socket.gethostname()
    return [f"run {rid}: {samples} samples wait to reach the store, in {host}:{path} (shipped by "
            "'tensorgauge ship' on this machine, or at the end of the next 'tensorgauge run' into this store from it)"
            for rid, path, samples in waiting_spools(local_data_dir(), redact(location))
            if run_id is None or rid.startswith(run_id)]
