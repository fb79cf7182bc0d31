"""The stored records, the store's tables and the ``tensorgauge.run/1`` document as Markdown tables,
written from the declarations in :mod:`tensorgauge.model` and :mod:`tensorgauge.store.schema` (the
documentation site's "store and JSON" page is built from these, never kept by hand)."""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields

from tensorgauge.analyse.run_report import RunReport
from tensorgauge.checks import KINDS
from tensorgauge.hook.protocol import PAYLOADS
from tensorgauge.model import (
    BUDGET_FIELDS,
    ENV_PARTS,
    RUN_SCHEMA,
    Event,
    Finding,
    GpuReading,
    Phase,
    RunRecord,
    Sample,
    Summary,
)
from tensorgauge.store.schema import SCHEMA_VERSION, create_statements
from tensorgauge.store.sqlite import TYPES as SQLITE_TYPES


def _kind(kind: str) -> str:
    return KINDS.get(kind.rstrip("?"), kind) + (", or null" if kind.endswith("?") else "")


def declared_table(record: type) -> str:
    """A record's declared fields: name, kind, unit, where the figure comes from."""
    rows = ["| field | kind | unit | source |", "| --- | --- | --- | --- |"]
    for f in fields(record):
        meta = f.metadata
        shown = f" (shown as \"{meta['shown']}\")" if meta.get("shown") else ""
        rows.append(f"| `{f.name}` | {_kind(meta['kind'])} | {meta.get('unit') or ''} | "
                    f"{(meta.get('source') or '').replace('|', '/')}{shown} |")
    return "\n".join(rows)


def dataclass_table(record: type) -> str:
    """An analysed record's fields (not stored as columns): name and type."""
    hints = typing.get_type_hints(record)
    rows = ["| field | type | default |", "| --- | --- | --- |"]
    for f in fields(record):
        default = "" if f.default is MISSING else f"`{f.default!r}`"
        kind = str(hints[f.name]).replace("typing.", "").replace("|", "or")
        rows.append(f"| `{f.name}` | `{kind}` | {default} |")
    return "\n".join(rows)


def map_table(declared: dict[str, str]) -> str:
    rows = ["| key | kind |", "| --- | --- |"]
    rows += [f"| `{key}` | {_kind(kind)} |" for key, kind in declared.items()]
    return "\n".join(rows)


def run_document_keys() -> list[str]:
    """The top-level keys of ``tensorgauge.run/1``, as :meth:`RunReport.to_dict` writes them."""
    record = RunRecord(run_id="r", command=["python"], started_at="2026-01-01T00:00:00+00:00")
    summary = Summary(cpu_seconds=0.0, cores_busy_mean=0.0, cores_busy_peak=0.0, rss_peak_bytes=0,
                      uss_peak_bytes=None, threads_peak=0, processes_peak=0, samples=0)
    return list(RunReport(record=record, events=[], summary=summary).to_dict())


def markdown() -> str:
    statements = "\n".join(f"{s};" for s in create_statements(SQLITE_TYPES))
    record_fields = {f.name for f in fields(RunRecord)}
    keys = ", ".join(f"`{k}`" + ("" if k in record_fields or k == "schema" else "*") for k in run_document_keys())
    parts = [
        f"## The run document (`{RUN_SCHEMA}`)",
        f"`tensorgauge run --json PATH` and `tensorgauge show RUN --json` write one object with these keys: {keys}. "
        "Keys without a star are the run record's fields below; `summary`, `phases` and `findings` are the "
        "analysed records further down; `input_split`, `memory_breakdown`, `post_mortem` and "
        "`batch_size_search` are objects of the analysis, null where they do not apply. Adding keys is "
        "allowed; renaming one is not.",
        "### The run record (`RunRecord`)", declared_table(RunRecord),
        "### `env`: the fingerprint",
        *[f"`env.{part}`\n\n{map_table(declared)}" for part, declared in ENV_PARTS.items()],
        "### `budget`", map_table(BUDGET_FIELDS),
        "### `summary` (`Summary`)", dataclass_table(Summary),
        "### `phases` (`Phase`, one per phase; `parent` indexes this list)", dataclass_table(Phase),
        "### `findings` (`Finding`)", dataclass_table(Finding) +
        "\n\nThe ids and what each means: [Findings](findings/index.md).",
        "## The stored records",
        "### `Sample`: the process tree and the machine at one instant", declared_table(Sample),
        "### `GpuReading`: one GPU in a sample", declared_table(GpuReading),
        "### `Event`: a message from the hook inside the job", declared_table(Event),
        "Event kinds (`kind`) and the TypedDict that declares each one's `data`: " +
        ", ".join(f"`{kind}` ({payload.__name__})" for kind, payload in PAYLOADS.items()) + ".",
        f"## The store's tables (schema version {SCHEMA_VERSION}, as SQLite creates them)",
        f"```sql\n{statements}\n```",
    ]
    return "\n\n".join(parts) + "\n"
