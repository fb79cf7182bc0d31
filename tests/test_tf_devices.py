"""`tensorgauge devices` on real models: the three formats, a device scope, bad input;
on a machine with a GPU, placement on it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import made_once, needs_tf

from tensorgauge.cli import main

pytestmark = [needs_tf, pytest.mark.tf]
JOBS = Path(__file__).parent / "jobs"
WEIGHT_BYTES = 4 * (8 * 16 + 16 + 16 + 1)  # Dense(16) on 8 inputs, Dense(1)


def _save_models(folder: Path) -> None:
    subprocess.run([sys.executable, str(JOBS / "save_models.py"), str(folder)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return made_once(tmp_path_factory, "models", _save_models)


def devices(capsys, *args):
    assert main(["devices", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name, fmt", [("m.keras", "keras"), ("m.h5", "h5"), ("saved", "savedmodel")])
def test_each_format_lists_weights_ops_and_devices(models, capsys, name, fmt):
    result = devices(capsys, models / name)
    assert result["schema"] == "tensorgauge.devices/1" and result["format"] == fmt
    assert len(result["variables"]) == 4 and sum(v["bytes"] for v in result["variables"]) == WEIGHT_BYTES
    assert result["probe_input_shapes"] == [[1, 8]]
    # Which ops run depends on the CPU and the build (oneDNN fuses a Dense layer into MatMul,
    # _FusedMatMul or _MklNativeFusedMatMul): check that ops were placed and timed, never their names.
    assert sum(result["ops_by_device"].values()) >= 1
    timed = [o for ops in result["top_ops_by_device"].values() for o in ops]
    assert timed and all(o["type"] and o["seconds"] >= 0 for o in timed)
    assert set(result["top_ops_by_device"]) <= set(result["ops_by_device"]) | {"CPU:0"}
    if "GPU" not in " ".join(result["devices"]):
        assert result["weights_by_device"] == {"CPU:0": {"bytes": WEIGHT_BYTES, "variables": 4}}
        if result["driver_gpus"]:  # a GPU TensorFlow cannot use (a CPU-only build, as on the lent GPU machine)
            assert [f["id"] for f in result["findings"]] == ["gpu_not_visible"]
        else:
            assert result["findings"] == [] and "No GPU exists here" in result["note"]


def test_a_model_loaded_under_a_device_scope_is_reported_on_that_device(models, capsys):
    result = devices(capsys, models / "saved", "--logical-cpus", "2", "--device", "/CPU:1")
    assert result["devices"] == ["/device:CPU:0", "/device:CPU:1"] and result["load_device"] == "/CPU:1"
    assert {v["device"] for v in result["variables"]} == {"CPU:1"}
    assert "CPU:1" in result["ops_by_device"]  # the variable reads run where the variables are
    text_result = main(["devices", str(models / "m.keras"), "--logical-cpus", "2", "--device", "/CPU:1"])
    assert text_result == 0 and "CPU:1" in capsys.readouterr().out


@pytest.mark.parametrize("name, message", [
    ("custom.keras", "needs custom objects that cannot be imported here (Twice)"),
    ("w.weights.h5", "weights-only .h5 file"),
    ("truncated.keras", "truncated or not a keras model"),
    ("notes.txt", "not a model (expected a SavedModel directory"),
])
def test_bad_models_get_one_line_and_exit_2(models, tmp_path, capsys, name, message):
    path = models / name
    if name == "truncated.keras":
        (path := tmp_path / name).write_bytes((models / "m.keras").read_bytes()[:2000])
    if name == "notes.txt":
        (path := tmp_path / name).write_text("hello")
    assert main(["devices", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert message in lines[-1] and "Traceback" not in err and len(lines) <= 2  # [progress,] the error


@pytest.mark.gpu
def test_on_a_gpu_the_weights_and_ops_are_on_it(models, capsys):
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("no GPU visible to TensorFlow on this machine")
    result = devices(capsys, models / "m.keras")
    assert {v["device"] for v in result["variables"]} == {"GPU:0"}
    assert result["ops_by_device"].get("GPU:0", 0) >= 3 and result["findings"] == []
    scoped = devices(capsys, models / "saved", "--device", "/CPU:0")
    assert [f["id"] for f in scoped["findings"]][:1] == ["variables_on_cpu"]
