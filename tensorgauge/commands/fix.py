"""``tensorgauge fix RUN [--apply] [--verify] [--json PATH]``: the run's code-level findings written as a patch
to the job's own files; with ``--verify``, each fix rerun and timed (kept only where it pays and leaves the
training as it must); with ``--apply``, the patch written (the original kept beside it, or in git)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tensorgauge.commands._shared import console, open_store, progress_printer, write_json
from tensorgauge.errors import TensorgaugeError


def _applied_file(run_id: str):
    from tensorgauge.store import local_data_dir

    return local_data_dir() / "fixes" / f"{run_id}.json"


def _already_applied(run_id: str) -> dict[str, str]:
    """{path: the SHA-256 this run's patch left it with}, for the files still so."""
    from tensorgauge.edit.patch import sha256

    try:
        recorded = json.loads(_applied_file(run_id).read_text())
    except (OSError, ValueError):
        return {}
    still = {}
    for path, digest in (recorded if isinstance(recorded, dict) else {}).items():
        try:
            if sha256(Path(path).read_text()) == digest:
                still[path] = digest
        except (OSError, UnicodeDecodeError):
            continue
    return still


def _remember_applied(run_id: str, files: dict[str, str]) -> None:
    from tensorgauge.store import local_data_dir
    from tensorgauge.store.private import private_folder, write_own_file

    folder = private_folder(local_data_dir(), ("fixes",), "cannot remember the patch applied",
                            "set TENSORGAUGE_STORE to a folder of your own")
    write_own_file(folder / f"{run_id}.json", json.dumps(files, indent=1).encode())


def fix(store: str | None, ref: str, apply: bool = False, verify: bool = False, json_path: str | None = None,
        force: bool = False, steps: int | None = None, repeat: int = 1, only: list[str] | None = None) -> int:
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.edit.patch import apply as write_patch
    from tensorgauge.edit.patch import run_patch, sha256
    from tensorgauge.edit.sites import read_sites
    from tensorgauge.render.fix import fix_document, render_fix

    if repeat < 1 or (steps is not None and steps < 1):
        raise TensorgaugeError("--repeat and --steps take a whole number of at least 1")
    with open_store(store, create=False) as runs:
        report = RunReport.load(runs, ref)
    record = report.record
    if not read_sites(report.events).recorded:
        raise TensorgaugeError(f"run {record.run_id} has no call sites (recorded by an older tensorgauge, or with "
                               "--no-hook): record it again with 'tensorgauge run -- ...', then fix that run")
    already = _already_applied(record.run_id)  # files this run's patch was written to: nothing left there
    relative_to = record.cwd or os.getcwd()
    patch = run_patch(report, set(only) if only else None, set(already))
    verified: dict = {}
    together = None
    if verify and patch.proposals:
        verified, reruns, before = _verify(record, patch, store, steps, repeat)
        paying = {p.edit.fix for i, p in enumerate(patch.proposals) if verified[i].pays}
        patch.files = run_patch(report, paying, set(already)).files if paying else {}
        if len(paying) > 1:
            together = _verify_together(patch, reruns, before, repeat)
    applied = None
    if apply and patch.files:
        applied = write_patch(patch, force=force)
        _remember_applied(record.run_id, {p: sha256(f.patched) for p, f in patch.files.items()})
    if json_path:
        write_json(fix_document(record.run_id, patch, verified, relative_to, applied, together), json_path, store)
        if json_path == "-":
            return 0
    render_fix(console(), record.run_id, patch, verified, relative_to, applied, sorted(already), together)
    return 0


def _verify(record, patch, store: str | None, steps: int | None, repeat: int) -> tuple[dict, object, list]:
    from tensorgauge.commands._verify import Reruns, rerun_pairs
    from tensorgauge.edit.outcome import judge

    originals = {path: file.original for path, file in patch.files.items()}
    for proposal in patch.proposals:
        path = proposal.edit.site.path
        if path not in originals:
            originals[path] = Path(path).read_text()
    reruns = Reruns(record, store, steps, progress_printer())
    total = repeat * (1 + len(patch.proposals))
    progress_printer()(f"verifying {len(patch.proposals)} fix(es): {total} reruns of "
                       f"{' '.join(record.command)}" + (f", each fit cut at {steps} steps" if steps else ""))
    before, after = rerun_pairs(reruns, patch.proposals, originals, repeat)
    return {i: judge(p.edit, before, after[i]) for i, p in enumerate(patch.proposals)}, reruns, before


def _verify_together(patch, reruns, before: list, repeat: int):
    """The fixes that paid, rerun together as the patch --apply writes, against the same reruns as-is."""
    from tensorgauge.edit.outcome import judge_patch

    after = [reruns.run("patch", {path: file.patched for path, file in patch.files.items()}) for _ in range(repeat)]
    return judge_patch([e for file in patch.files.values() for e in file.edits], before, after)


VERB = "fix"
HELP = "write a run's code-level findings as a patch to the job's code (--verify: rerun and time it)"
DESCRIPTION = ("Turns each finding whose fix is a code change (input_bound, small_batch, eager_execution, "
               "retracing, xla_on_cpu, thread_limited, models_not_cleared, predict_in_loop) into an edit of the job's own files at the call site the run "
               "recorded, and prints it as a unified diff. --verify reruns the job with each fix alone and keeps "
               "only those that pay without changing the training as they must not; --apply writes the patch.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run id, unique prefix, name, or 'last'")
    p.add_argument("--apply", action="store_true", help="write the patch into the files (the original kept "
                   "as FILE.orig, or by git where the file is committed)")
    p.add_argument("--force", action="store_true", help="with --apply: patch files with uncommitted changes too")
    p.add_argument("--verify", action="store_true", help="rerun the job (seeded alike) as it is and with each fix "
                   "alone, under the tool, and report what each gained; a fix that does not pay is left out")
    p.add_argument("--steps", type=int, metavar="N", help="with --verify: stop each fit after N training steps "
                   "(long jobs)")
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="with --verify: N interleaved pairs of "
                   "reruns per fix, their medians compared (default 1)")
    p.add_argument("--only", action="append", metavar="FIX", help="only this fix (prefetch, parallel_map, cache, "
                   "steps_per_execution, no_run_eagerly, tf_function, reduce_retracing, no_jit, direct_call, "
                   "clear_session, thread_pools, loader_workers); "
                   "may be repeated")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the tensorgauge.fix/1 document, to "
                   "stdout or PATH")


def main(args: argparse.Namespace) -> int:
    return fix(args.store, args.run, args.apply, args.verify, args.json, args.force, args.steps, args.repeat,
               args.only)
