"""The store's tables, derived from the record declarations in :mod:`tensorgauge.model`.

``samples`` has one column per :class:`~tensorgauge.model.Sample` field and
``events`` one per :class:`~tensorgauge.model.Event` field (numbers and integers
as such, anything else as JSON text); ``runs`` keeps each
:class:`~tensorgauge.model.RunRecord` as one JSON document. Samples are rows
only for a minute: ``sample_chunks`` holds them compressed, a minute a row
(:mod:`.chunks`). ``analyses`` keeps each finished run's analysis, so reading
a run does not grow with its length. A store written by an older version gains
the tables, columns and indexes it lacks when it is opened (:func:`missing_columns`):
adding a field to ``Sample`` needs no migration written by hand.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from tensorgauge.model import Event, Sample

CHUNK_SAMPLES = 600  # samples in a row of sample_chunks: a minute at 10 Hz, ~7 KB compressed
SCHEMA_VERSION = 3  # 1: no `runnable` column; 2: columns derived from the model; 3: sample chunks, analyses


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # the field's declared kind (tensorgauge.checks.KINDS)
    required: bool

    @property
    def is_json(self) -> bool:
        return self.kind.rstrip("?") not in ("number", "int", "text", "bool")

    def sql(self, types: dict[str, str]) -> str:
        base = self.kind.rstrip("?")
        sql_type = types["real"] if base == "number" else types["int"] if base in ("int", "bool") else "TEXT"
        return f"{self.name} {sql_type}" + (" NOT NULL" if self.required and not self.is_json else "")


def _columns(cls: type) -> tuple[Column, ...]:
    return tuple(Column(f.name, f.metadata["kind"], not f.metadata["kind"].endswith("?")
                        and f.default is MISSING and f.default_factory is MISSING)
                 for f in fields(cls))


SAMPLE_COLUMNS = _columns(Sample)
EVENT_COLUMNS = _columns(Event)
TABLE_COLUMNS = {"samples": SAMPLE_COLUMNS, "events": EVENT_COLUMNS}


def create_statements(types: dict[str, str]) -> list[str]:
    """``types``: how the database spells "real", "int", and an event id column ("event_id")."""
    samples = ", ".join(c.sql(types) for c in SAMPLE_COLUMNS)
    events = ", ".join(c.sql(types) for c in EVENT_COLUMNS)
    return [
        "CREATE TABLE IF NOT EXISTS runs (run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, record TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS samples (run_id TEXT NOT NULL, {samples})",
        "CREATE INDEX IF NOT EXISTS samples_run ON samples (run_id, t)",
        f"CREATE TABLE IF NOT EXISTS events ({types['event_id']}run_id TEXT NOT NULL, {events})",
        *added_in_3(types),
        *missing_indexes(set(), types),
    ]


def added_in_3(types: dict[str, str]) -> list[str]:
    """Samples a minute a row, compressed; each finished run's analysis (``key``: what it was computed from)."""
    return [
        f"CREATE TABLE IF NOT EXISTS sample_chunks (run_id TEXT NOT NULL, first_t {types['real']} NOT NULL, "
        f"last_t {types['real']} NOT NULL, count {types['int']} NOT NULL, rss_peak_bytes {types['int']}, "
        f"data {types['blob']} NOT NULL)",
        "CREATE INDEX IF NOT EXISTS sample_chunks_run ON sample_chunks (run_id, first_t)",
        "CREATE TABLE IF NOT EXISTS analyses (run_id TEXT PRIMARY KEY, key TEXT NOT NULL, doc TEXT NOT NULL)",
    ]


def missing_indexes(present: set[str], types: dict[str, str]) -> list[str]:
    """The indexes a store lacks. Events are read in the order they were written: an index on
    the run alone keeps SQLite's rows in rowid order (no sort of a 200,000-event run)."""
    wanted = {"events_run_order": f"CREATE INDEX IF NOT EXISTS events_run_order ON events ({types['event_order']})"}
    return [sql for name, sql in wanted.items() if name not in present]


def missing_columns(table: str, present: set[str], types: dict[str, str]) -> list[str]:
    """``ALTER TABLE`` statements adding the declared columns an older store lacks (nullable)."""
    return [f"ALTER TABLE {table} ADD COLUMN {Column(c.name, c.kind, False).sql(types)}"
            for c in TABLE_COLUMNS[table] if c.name not in present]
