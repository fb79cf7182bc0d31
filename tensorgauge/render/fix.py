"""``tensorgauge fix``'s output: each patch with its diff and, verified, what it gained; each refusal with
why; and the ``tensorgauge.fix/1`` document."""

from __future__ import annotations

import os

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from tensorgauge.edit.outcome import Verified
from tensorgauge.edit.patch import Patch
from tensorgauge.edit.plan import Edit
from tensorgauge.units import format_bytes, format_seconds

FIX_SCHEMA = "tensorgauge.fix/1"


def _where(site, relative_to: str | None) -> str | None:
    if site is None:
        return None
    path = os.path.relpath(site.path, relative_to) if relative_to else site.path
    return f"{path}:{site.line}"


def _verified_text(v: Verified) -> str:
    before, after = v.before.get("training_seconds"), v.after.get("training_seconds")
    step_b, step_a = v.before.get("step_seconds_p50"), v.after.get("step_seconds_p50")
    parts = []
    if before is not None and after is not None:
        runs = v.before.get("runs", 1)
        parts.append(f"training {format_seconds(before)} -> {format_seconds(after)}"
                     + (f" ({v.gain:.2f}x)" if v.gain else "") + (f", medians of {runs} pairs" if runs > 1 else ""))
    peak_b, peak_a = v.before.get("rss_peak_bytes"), v.after.get("rss_peak_bytes")
    if peak_b and peak_a:
        parts.append(f"memory peak {format_bytes(peak_b)} -> {format_bytes(peak_a)}")
    if step_b is not None and step_a is not None:
        parts.append(f"step {format_seconds(step_b)} -> {format_seconds(step_a)}")
    if v.finding_gone is not None:
        parts.append("finding gone" if v.finding_gone else "finding still there")
    if v.training_unchanged is not None or v.training_why:
        parts.append(("training unchanged: " if v.training_unchanged else "training: ") + v.training_why)
    return "; ".join(parts)


def render_fix(console: Console, run_id: str, patch: Patch, verified: dict[int, Verified], relative_to: str | None,
               applied: list[tuple[str, str | None]] | None = None, already: list[str] | None = None,
               together: Verified | None = None) -> None:
    if not patch.proposals and not patch.refusals:
        console.print(f"run {escape(run_id)}: nothing to fix: no finding of it is a change to the job's code"
                      + (" left to make" if already else ""))
    for i, proposal in enumerate(patch.proposals):
        edit = proposal.edit
        v = verified.get(i)
        mark = "" if v is None else ("[green]pays[/green] " if v.pays else "[yellow]left out[/yellow] ")
        console.print(f"[bold]{mark}{escape(edit.finding)}[/bold] {escape(_where(edit.site, relative_to) or '')}: "
                      f"{escape(edit.summary)}")
        if edit.note:
            console.print(f"  note: {escape(edit.note)}")
        console.print(Syntax(proposal.diff.rstrip("\n"), "diff", theme="ansi_dark", background_color="default"))
        if v is not None:
            console.print(f"  verified: {escape(_verified_text(v))}")
            if not v.pays and v.why:
                console.print(f"  [yellow]left out of the patch[/yellow]: {escape(v.why)}")
    for refusal in patch.refusals:
        where = _where(refusal.site, relative_to)
        console.print(f"[bold]not patched[/bold] {escape(refusal.finding)} ({escape(refusal.fix)})"
                      + (f" at {escape(where)}" if where else "") + f": {escape(refusal.why)}")
    if together is not None:
        console.print(f"[bold]the patch[/bold] (the fixes that paid, together): {escape(_verified_text(together))}")
    for path in already or []:
        console.print(f"{escape(path)}: this run's patch is applied already")
    if applied:
        for path, kept in applied:
            shown = os.path.relpath(path, relative_to) if relative_to else path
            console.print(f"patched {escape(shown)}" + (f" (the original kept as {escape(kept)})" if kept
                                                        else " (git keeps the original)"))
    elif patch.files:
        console.print(f"tensorgauge fix {escape(run_id)} --apply writes this patch"
                      + ("" if verified else "; --verify reruns the job with each fix and times it"))


def _edit_dict(edit: Edit, relative_to: str | None) -> dict:
    return {"finding": edit.finding, "fix": edit.fix, "file": edit.site.path, "line": edit.site.line,
            "where": _where(edit.site, relative_to), "summary": edit.summary, "note": edit.note,
            "numbers": edit.numbers}


def fix_document(run_id: str, patch: Patch, verified: dict[int, Verified], relative_to: str | None,
                 applied: list[tuple[str, str | None]] | None = None, together: Verified | None = None) -> dict:
    fixes = []
    for i, proposal in enumerate(patch.proposals):
        v = verified.get(i)
        fixes.append({**_edit_dict(proposal.edit, relative_to), "diff": proposal.diff, "refused": False, "why": None,
                      "verified": v.to_dict() if v is not None else None})
    fixes += [{"finding": r.finding, "fix": r.fix, "file": r.site.path if r.site else None,
               "line": r.site.line if r.site else None, "where": _where(r.site, relative_to), "diff": None,
               "refused": True, "why": r.why, "verified": None} for r in patch.refusals]
    return {"schema": FIX_SCHEMA, "run_id": run_id, "fixes": fixes,
            "patch": "".join(f.diff(relative_to) for f in patch.files.values()),
            "patch_verified": together.to_dict() if together is not None else None,
            "applied": [{"file": p, "original_kept": k} for p, k in applied or []]}
