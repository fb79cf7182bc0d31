"""A run's data waiting for its PostgreSQL store: a local SQLite file, one row per batch in the order
written, and the run's latest record.

Crash-safe (each batch is its own SQLite transaction: a killed monitor keeps all it wrote) and bounded
(:data:`MAX_BYTES`, ``$TENSORGAUGE_SPOOL_MAX_BYTES``: past it a batch is refused, and counted as lost by the
writer). It lives in the user's data folder, ``spool/`` (private, mode 0700), named by the run's id; the
store it is for is kept by location without its password. A batch leaves the spool only once the store
has committed it (see :mod:`.shipping`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from pathlib import Path

from tensorgauge.errors import StoreError
from tensorgauge.store.private import UntrustedPathError, private_folder

MAX_BYTES = 256 << 20  # ~1 day of one worker's samples at 10 Hz: past it, a batch is lost, not the disk
SPOOL_ENV = "TENSORGAUGE_SPOOL_MAX_BYTES"


def spool_folder(data_dir: Path) -> Path:
    """``DATA_DIR/spool``, made private where missing."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return private_folder(data_dir, ("spool",), "the spool folder",
                              "another user could read or change the runs waiting there; remove it")
    except (UntrustedPathError, OSError) as exc:
        raise StoreError(str(exc)) from None


class Spool:
    """Batches of (sample rows, event rows) for one run, and its latest record, in a local file."""

    def __init__(self, path: Path, store_location: str | None = None, run_id: str | None = None,
                 max_bytes: int | None = None):
        self.path = path
        self.max_bytes = max_bytes or int(os.environ.get(SPOOL_ENV) or MAX_BYTES)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            self.conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.executescript(
                "CREATE TABLE IF NOT EXISTS batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, samples INTEGER NOT NULL, "
                "events INTEGER NOT NULL, body BLOB NOT NULL);"
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
            for key, value in (("store", store_location), ("run_id", run_id)):
                if value is not None:
                    self._set(key, value)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot keep the run's data in {path}: {exc}") from None

    def _set(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                          (key, value))

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def append(self, sample_rows: list[tuple], event_rows: list[tuple]) -> None:
        """One batch, durable when this returns; :class:`StoreError` when the spool is full or the disk fails."""
        if self.size_bytes() > self.max_bytes:
            raise StoreError(f"the store did not answer and the run's spool {self.path} is full "
                             f"({self.max_bytes >> 20} MiB): samples are being lost")
        body = zlib.compress(json.dumps([sample_rows, event_rows]).encode(), 1)
        try:
            self.conn.execute("INSERT INTO batches (samples, events, body) VALUES (?, ?, ?)",
                              (len(sample_rows), len(event_rows), body))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot keep the run's data in {self.path}: {exc}") from None

    def set_record(self, record: dict) -> None:
        try:
            self._set("record", json.dumps(record))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot keep the run's data in {self.path}: {exc}") from None

    def record(self) -> dict | None:
        text = self.meta("record")
        return json.loads(text) if text else None

    def pending(self, limit: int) -> list[tuple[int, list[tuple], list[tuple]]]:
        """The oldest ``limit`` batches: (seq, sample rows, event rows)."""
        rows = self.conn.execute("SELECT seq, body FROM batches ORDER BY seq LIMIT ?", (limit,)).fetchall()
        out = []
        for seq, body in rows:
            samples, events = json.loads(zlib.decompress(body))
            out.append((seq, [tuple(r) for r in samples], [tuple(r) for r in events]))
        return out

    def waiting(self) -> tuple[int, int]:
        """(batches, samples) not yet shipped."""
        batches, samples = self.conn.execute("SELECT COUNT(*), COALESCE(SUM(samples), 0) FROM batches").fetchone()
        return int(batches), int(samples)

    def shipped(self, seq: int) -> None:
        """The store has committed every batch up to ``seq``: they leave the spool."""
        self.conn.execute("DELETE FROM batches WHERE seq <= ?", (seq,))

    def close(self, remove: bool = False) -> None:
        """Close; with ``remove``, delete the file (everything in it was shipped)."""
        self.conn.close()
        if remove:
            for part in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                try:
                    part.unlink()
                except FileNotFoundError:
                    pass


def waiting_spools(data_dir: Path, store_location: str) -> list[tuple[str, Path, int]]:
    """(run id, spool file, samples waiting) of this machine's spools for the store at ``store_location``."""
    folder = data_dir / "spool"
    out = []
    for path in sorted(folder.glob("*.db")) if folder.is_dir() else ():
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
            try:
                meta = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('store', 'run_id')").fetchall())
                samples = conn.execute("SELECT COALESCE(SUM(samples), 0), COUNT(*) FROM batches").fetchone()
                has_record = conn.execute("SELECT 1 FROM meta WHERE key = 'record'").fetchone() is not None
            finally:
                conn.close()
        except sqlite3.Error:
            continue
        if meta.get("store") == store_location and (samples[1] or has_record):
            out.append((meta.get("run_id", path.stem), path, int(samples[0])))
    return out


def waiting_lines(location: str, run_id: str | None = None) -> list[str]:
    """What waits on this machine to reach the store at ``location`` (of one run with ``run_id``), one line
    per run, for ``runs`` and ``show``."""
    import socket

    from tensorgauge.store.location import local_data_dir
    from tensorgauge.store.postgres import redact

    host = socket.gethostname()
    return [f"run {rid}: {samples} samples wait to reach the store, in {host}:{path} (shipped by the next "
            "'tensorgauge run' into this store from this machine)"
            for rid, path, samples in waiting_spools(local_data_dir(), redact(location))
            if run_id is None or rid.startswith(run_id)]
