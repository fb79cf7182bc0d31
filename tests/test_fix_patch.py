"""The patch on real files: only the user's own, unchanged since the run; one file's edits together, bottom
up, the import added once; --apply's original kept (or git's), a dirty work tree refused; and the
judgement of a verified fix from its reruns."""

import subprocess
import sysconfig
from pathlib import Path

import pytest

from tensorgauge.edit.outcome import Rerun, compare_losses, judge
from tensorgauge.edit.patch import apply, prepare, sha256
from tensorgauge.edit.plan import Edit, Refusal, plan
from tensorgauge.edit.sites import read_sites
from tensorgauge.errors import TensorgaugeError
from tensorgauge.hook.protocol import Kind
from tensorgauge.model import Event, Finding

pytest.importorskip("libcst")

SOURCE = """import numpy as np
import keras

ds = tf_data_from(x)
ds = ds.map(decode)  # costly
ds = ds.batch(32)
"""


def recorded(path: Path, text: str | None = None) -> tuple[list, dict]:
    text = path.read_text() if text is None else text
    stages = [{"stage": "Map", "cls": "_MapDataset", "site": f"{path}:5", "function": "decode",
               "location": "train.py:1", "elements": 100, "element_bytes": 64},
              {"stage": "Batch", "cls": "_BatchDataset", "site": f"{path}:6", "elements": 4}]
    sites = read_sites([Event(t=1.0, pid=1, kind=Kind.CODE_SITES, data={
        "call": "fit", "site": f"{path}:9", "stages": stages, "files": {str(path): sha256(text)}})])
    finding = Finding("input_bound", "high", "input", evidence={"costliest_stage": {"stage": "Map",
                                                                                   "location": "train.py:1"}})
    return plan([finding], sites), sites.files


def test_every_edit_of_a_file_together_and_tensorflow_imported_once(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    planned, files = recorded(script)
    patch = prepare(planned, files, str(tmp_path))
    assert [p.edit.fix for p in patch.proposals] == ["cache", "parallel_map", "prefetch"]
    patched = patch.files[str(script)].patched
    assert patched == """import numpy as np
import keras
import tensorflow as tf

ds = tf_data_from(x)
ds = ds.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()  # costly
ds = ds.batch(32).prefetch(tf.data.AUTOTUNE)
"""
    assert patch.files[str(script)].diff(str(tmp_path)).startswith("--- a/train.py\n+++ b/train.py\n")


def test_a_file_changed_since_the_run_or_an_installed_package_is_refused(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    planned, _ = recorded(script, text=SOURCE + "# as it was\n")
    patch = prepare(planned, {str(script): sha256(SOURCE + "# as it was\n")})
    assert not patch.proposals and all("changed since the run" in r.why for r in patch.refusals)
    library = Path(sysconfig.get_paths()["purelib"]) / "train.py"
    edit = Edit("input_bound", "cache", type(planned[0].site)(str(library), 5), "", "equal", lambda s, tf: s)
    refused = prepare([edit], {str(library): "x"})
    assert [r.why for r in refused.refusals] == ["train.py: it is an installed package's, not the job's own code"]


def test_apply_keeps_the_original_beside_the_file_and_its_mode(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    script.chmod(0o640)
    (tmp_path / "train.py.orig").write_text("an older backup\n")
    planned, files = recorded(script)
    written = apply(prepare(planned, files))
    assert written == [(str(script), str(tmp_path / "train.py.orig.1"))]
    assert (tmp_path / "train.py.orig.1").read_text() == SOURCE
    assert (tmp_path / "train.py.orig").read_text() == "an older backup\n"
    assert script.stat().st_mode & 0o777 == 0o640 and ".cache()" in script.read_text()


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


def test_in_git_a_committed_file_is_patched_without_a_copy_and_a_dirty_one_needs_force(tmp_path):
    git(tmp_path, "init", "-q")
    script = tmp_path / "train.py"
    script.write_text(SOURCE)
    git(tmp_path, "add", "train.py")
    git(tmp_path, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "job")
    planned, files = recorded(script)
    assert apply(prepare(planned, files)) == [(str(script), None)]
    assert not (tmp_path / "train.py.orig").exists()
    git(tmp_path, "checkout", "-q", "train.py")
    script.write_text(SOURCE + "# the user's own change, not committed\n")
    planned, files = recorded(script)
    with pytest.raises(TensorgaugeError, match="uncommitted"):
        apply(prepare(planned, files))
    assert script.read_text().endswith("not committed\n") and ".cache()" not in script.read_text()
    assert apply(prepare(planned, files), force=True) == [(str(script), str(tmp_path / "train.py.orig"))]


def rerun(seconds, losses, findings=(), exit_code=0):
    return Rerun("r", seconds, seconds / 100, [Finding(f, "high", f) for f in findings], [losses], exit_code)


def edit(numbers="equal"):
    return Edit("input_bound", "cache", None, "", numbers, lambda s, tf: s)  # type: ignore[arg-type]


def test_a_fix_pays_leaves_the_losses_and_its_finding_goes():
    verified = judge(edit(), [rerun(4.0, [0.5, 0.4]), rerun(4.4, [0.5, 0.4])],
                     [rerun(2.0, [0.5, 0.4]), rerun(2.0, [0.5, 0.4])])
    assert verified.pays and verified.gain == pytest.approx(2.1) and verified.finding_gone
    assert verified.to_dict()["before"] == {"training_seconds": 4.2, "step_seconds_p50": 0.042, "runs": 2}


def test_a_fix_that_does_not_pay_or_changes_what_it_must_not_is_left_out():
    slow = judge(edit(), [rerun(4.0, [0.5])], [rerun(3.9, [0.5], findings=["input_bound"])])
    assert not slow.pays and "does not pay" in slow.why and slow.finding_gone is False
    changed = judge(edit(), [rerun(4.0, [0.5])], [rerun(2.0, [0.51])])
    assert not changed.pays and "changes the training" in changed.why and "must not change" in changed.why
    close = judge(edit("close"), [rerun(4.0, [0.5])], [rerun(2.0, [0.505])])
    assert close.pays and close.training_unchanged
    failed = judge(edit(), [rerun(4.0, [0.5])], [rerun(2.0, [0.5], exit_code=1)])
    assert not failed.pays and "exit 1" in failed.why


def test_a_gain_half_the_pairs_do_not_bear_out_does_not_pay():
    split = judge(edit(), [rerun(4.0, [0.5])] * 4,
                  [rerun(3.0, [0.5]), rerun(3.2, [0.5]), rerun(4.4, [0.5]), rerun(4.4, [0.5])])
    assert split.gain > 1.05 and not split.pays and "within the spread" in split.why and "3.00-4.40 s" in split.why
    outlier = judge(edit(), [rerun(3.3, [0.5]), rerun(3.0, [0.5]), rerun(3.2, [0.5])],  # the second pair: a neighbour
                    [rerun(2.4, [0.5]), rerun(3.4, [0.5]), rerun(2.4, [0.5])])
    assert outlier.pays and outlier.gain == pytest.approx(3.2 / 2.4, rel=0.01)


def test_a_memory_fix_is_judged_by_the_memory_peak():
    memory = Edit("models_not_cleared", "clear_session", None, "", "equal", lambda s, tf: s,  # type: ignore[arg-type]
                  pays_in="memory")
    before = [Rerun("b", 4.0, 0.01, [Finding("models_not_cleared", "low", "m")], [[0.5]], 0, 900 << 20)]
    less = judge(memory, before, [Rerun("a", 4.1, 0.01, [], [[0.5]], 0, 600 << 20)])
    assert less.pays and less.gain == pytest.approx(1.5) and less.finding_gone and less.after["rss_peak_bytes"] == 600 << 20
    same = judge(memory, before, [Rerun("a", 3.0, 0.01, [], [[0.5]], 0, 890 << 20)])
    assert not same.pays and "memory peak 0.99x" in same.why


def test_losses_not_seen_are_said_so():
    assert compare_losses([], [[0.5]], "equal") == (None, "not compared: the fits' losses were not recorded "
                                                          "(a custom loop's are not visible)")
    assert compare_losses([[0.5, 0.4]], [[0.5]], "equal")[0] is False


def test_refusals_pass_through_unchanged(tmp_path):
    refusal = Refusal("input_bound", "cache", None, "why")
    assert prepare([refusal], {}).refusals == [refusal]
