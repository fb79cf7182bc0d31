"""The planned edits made on the job's files: checked safe (the user's own file, unchanged since the run),
shown as unified diffs, and written with ``--apply`` (the original kept, or in git's keeping).

Edits of one file are made from its last line to its first, so an added line never moves a site not yet
edited; an ``import tensorflow as tf`` an edit needs goes in last. Two edits on one line: prefetch first,
then cache (``ds.map(f).cache().prefetch(...)``), then the others.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import site
import subprocess
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from tensorgauge.edit import codemods
from tensorgauge.edit.plan import Edit, Planned, Refusal
from tensorgauge.errors import TensorgaugeError

SAME_LINE_ORDER = {"prefetch": 0, "cache": 1}


@dataclass
class Proposal:
    edit: Edit
    diff: str  # this edit alone, against the file as the run read it


@dataclass
class FilePatch:
    path: str
    original: str
    patched: str
    edits: list[Edit] = field(default_factory=list)

    def diff(self, relative_to: str | None = None) -> str:
        return unified_diff(self.path, self.original, self.patched, relative_to)


@dataclass
class Patch:
    proposals: list[Proposal] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    files: dict[str, FilePatch] = field(default_factory=dict)  # every proposal of a file together


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unified_diff(path: str, before: str, after: str, relative_to: str | None = None) -> str:
    shown = os.path.relpath(path, relative_to) if relative_to else path
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{shown}",
                                        f"b/{shown}"))


def _library_folders() -> tuple[str, ...]:
    folders = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        folders.update(site.getsitepackages() + [site.getusersitepackages()])
    except AttributeError:
        pass
    return tuple(os.path.realpath(f) + os.sep for f in folders if f)


def not_users(path: str) -> str | None:
    """Why ``path`` is not the user's code to edit (None: it is)."""
    real = os.path.realpath(path)
    if real.startswith(_library_folders()) or f"{os.sep}site-packages{os.sep}" in real \
            or f"{os.sep}dist-packages{os.sep}" in real:
        return "it is an installed package's, not the job's own code"
    return None


def read_checked(path: str, recorded: dict[str, str | None]) -> tuple[str | None, str | None]:
    """(the file's text, None) when it is safe to edit, else (None, why not)."""
    why = not_users(path)
    if why:
        return None, why
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"it cannot be read ({exc.__class__.__name__}: {exc})"
    expected = recorded.get(path)
    if expected is None:
        return None, "the run did not record its hash, so a change since the run would go unseen"
    if sha256(text) != expected:
        return None, "it changed since the run (its SHA-256 differs): run the job again, then fix that run"
    return text, None


def _apply_all(text: str, edits: list[Edit]) -> tuple[str, list[Edit], list[Refusal]]:
    tf = codemods.module_alias(text, "tensorflow")
    ordered = sorted(edits, key=lambda e: (-e.site.line, SAME_LINE_ORDER.get(e.fix, 2)))
    made, refused = [], []
    for edit in ordered:
        try:
            changed = edit.change(text, tf or "tf")
        except codemods.Refused as exc:
            refused.append(Refusal(edit.finding, edit.fix, edit.site, str(exc)))
            continue
        if changed != text:
            text = changed
            made.append(edit)
    if tf is None and any(e.needs_tf for e in made):
        text = codemods.ensure_import(text, "tensorflow", "tf")[0]
    return text, made, refused


def _alone(text: str, edit: Edit) -> str:
    changed = edit.change(text, codemods.module_alias(text, "tensorflow") or "tf")
    if edit.needs_tf and codemods.module_alias(text, "tensorflow") is None:
        changed = codemods.ensure_import(changed, "tensorflow", "tf")[0]
    return changed


def prepare(planned: list[Planned], recorded: dict[str, str | None], relative_to: str | None = None,
            only: set[str] | None = None) -> Patch:
    """The patch of every planned edit that can be made (``only``: those fixes), and why each other cannot."""
    patch = Patch()
    by_file: dict[str, list[Edit]] = {}
    for item in planned:
        if isinstance(item, Refusal):
            patch.refusals.append(item)
        elif only is None or item.fix in only:
            by_file.setdefault(item.site.path, []).append(item)
    for path, edits in by_file.items():
        text, why = read_checked(path, recorded)
        if text is None:
            patch.refusals += [Refusal(e.finding, e.fix, e.site, f"{os.path.basename(path)}: {why}") for e in edits]
            continue
        for edit in edits:
            try:
                alone = _alone(text, edit)
            except codemods.Refused as exc:
                patch.refusals.append(Refusal(edit.finding, edit.fix, edit.site, str(exc)))
                continue
            if alone != text:
                patch.proposals.append(Proposal(edit, unified_diff(path, text, alone, relative_to)))
        kept = [p.edit for p in patch.proposals if p.edit in edits]
        patched, made, _ = _apply_all(text, kept)
        if made:
            patch.files[path] = FilePatch(path, text, patched, made)
    return patch


def git_state(path: str) -> str:
    """"clean" (tracked, unchanged since its last commit), "dirty", or "none" (not in a git work tree)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        tracked = subprocess.run(["git", "-C", folder, "ls-files", "--error-unmatch", path],
                                 capture_output=True, timeout=10)
        if tracked.returncode != 0:
            inside = subprocess.run(["git", "-C", folder, "rev-parse", "--is-inside-work-tree"],
                                    capture_output=True, timeout=10)
            return "dirty" if inside.returncode == 0 else "none"  # untracked in a work tree: nothing keeps it
        status = subprocess.run(["git", "-C", folder, "status", "--porcelain", "--", path],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return "dirty" if status.stdout.strip() else "clean"


def backup_path(path: str) -> Path:
    """Beside the file: ``train.py.orig`` (``.orig.1``, ... where that is taken)."""
    candidate, n = Path(f"{path}.orig"), 0
    while candidate.exists():
        n += 1
        candidate = Path(f"{path}.orig.{n}")
    return candidate


def write_source(path: str, text: str) -> None:
    """Replace the file's text at once (a crash leaves the old or the new, never half), its mode kept."""
    target = Path(path)
    mode = target.stat().st_mode & 0o7777
    temporary = target.with_name(f".{target.name}.tensorgauge-{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def apply(patch: Patch, force: bool = False) -> list[tuple[str, str | None]]:
    """Write every patched file: (its path, where its original was kept: None where git keeps it).
    Refuses (before writing any) a file with uncommitted changes in a git work tree unless ``force``."""
    states = {path: git_state(path) for path in patch.files}
    dirty = [p for p, s in states.items() if s == "dirty"]
    if dirty and not force:
        raise TensorgaugeError(f"{', '.join(dirty)} has changes git does not keep (uncommitted or untracked): "
                               "commit them first, or --apply --force (the original is then kept beside it)")
    written = []
    for path, file in patch.files.items():
        kept: str | None = None
        if states[path] != "clean":
            backup = backup_path(path)
            backup.write_text(file.original)
            kept = str(backup)
        write_source(path, file.patched)
        written.append((path, kept))
    return written


def run_patch(report, only: set[str] | None = None, leave_out: set[str] | None = None) -> Patch:
    """The patch of a recorded run (an :class:`~tensorgauge.analyse.run_report.RunReport`): its findings'
    edits at the sites it recorded, on the files as they are now (``leave_out``: files not to touch)."""
    from tensorgauge.edit.plan import plan
    from tensorgauge.edit.sites import read_sites

    record = report.record
    sites = read_sites(report.events)
    host = record.env.get("host") or {}
    memory = min((m for m in (host.get("ram_bytes"), host.get("cgroup_memory_limit_bytes")) if m), default=None)
    planned = plan(report.findings, sites, report.input_split, memory, int(float(host.get("cores_allowed") or 1)))
    if leave_out:
        planned = [p for p in planned if p.site is None or p.site.path not in leave_out]
    return prepare(planned, sites.files, record.cwd or os.getcwd(), only)
