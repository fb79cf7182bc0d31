"""Placement: the devices audit's summary and findings, and run findings, on fakes;
the audit's log parsing and error messages."""

import pytest

from tensorgauge.analyse.findings import find
from tensorgauge.analyse.phases import build_phases
from tensorgauge.analyse.placement import summarise_audit
from tensorgauge.errors import TensorgaugeError
from tensorgauge.model import Event, RunRecord, Sample
from tensorgauge.sources.model_audit import model_format
from tensorgauge.sources.model_audit_job import PROBE_BEGIN, PROBE_END, load_error, placements

JOB = "/job:localhost/replica:0/task:0/device:"


def placement_findings(record, events, phases):
    return find(record, [], events, phases, category="placement")


def raw(devices, var_device="CPU:0", op_device="CPU:0", kernels=None, extra_ops=()):
    ops = [{"node": "model/dense/MatMul", "type": "MatMul", "device": JOB + op_device, "mode": "graph"},
           {"node": "model/dense/BiasAdd", "type": "BiasAdd", "device": JOB + op_device, "mode": "graph"},
           *extra_ops]
    return {"path": "m.keras", "format": "keras", "tensorflow_version": "2.21.0", "devices": devices,
            "variables": [{"name": "dense/kernel", "shape": [8, 16], "dtype": "float32", "bytes": 512,
                           "device": var_device},
                          {"name": "dense/bias", "shape": [16], "dtype": "float32", "bytes": 64,
                           "device": var_device}],
            "ops": ops, "kernel_devices": kernels or {},
            "timed_ops": [{"name": "model/dense/BiasAdd:_FusedMatMul", "plane": "/host:CPU", "seconds": 2e-5},
                          {"name": "model/dense/MatMul:MatMul", "plane": "/host:CPU", "seconds": 1e-5},
                          {"name": "volta_sgemm", "plane": "/device:GPU:0", "seconds": 5e-6}]}


def test_cpu_only_machine_flags_nothing_and_says_why():
    result = summarise_audit(raw(["/device:CPU:0"]))
    assert result["findings"] == [] and "No GPU exists here" in result["note"]
    assert result["weights_by_device"] == {"CPU:0": {"bytes": 576, "variables": 2}}
    assert result["ops_by_device"] == {"CPU:0": 2}
    assert [o["type"] for o in result["top_ops_by_device"]["CPU:0"]] == ["_FusedMatMul", "MatMul"]
    assert result["top_ops_by_device"]["GPU:0"][0]["type"] == "volta_sgemm"  # a GPU plane's kernel


def test_audit_on_a_gpu_machine_with_a_cpu_only_tensorflow_names_the_build():
    cpu_build = {**raw(["/device:CPU:0"]), "tf_build": {"is_cuda_build": False}}
    result = summarise_audit(cpu_build, {"gpus": ["NVIDIA H200"], "nvidia_driver": "580.159.04"})
    (finding,) = result["findings"]
    assert finding["id"] == "gpu_not_visible" and "CPU-only build" in finding["title"]
    assert "tensorflow[and-cuda]" in finding["fix"] and "see gpu_not_visible" in result["note"]
    assert result["driver_gpus"] == ["NVIDIA H200"]
    no_driver = summarise_audit(cpu_build, {"gpus": [], "nvidia_driver": None})
    assert no_driver["findings"] == [] and "No GPU exists here" in no_driver["note"]


def test_weights_and_ops_on_the_cpu_while_a_gpu_is_visible():
    where = summarise_audit({**raw(["/device:CPU:0", "/device:GPU:0"]), "load_device": "/CPU:0"})
    ids = [f["id"] for f in where["findings"]]
    assert ids == ["variables_on_cpu", "gpu_unused"] and where["note"] is None
    assert "loaded under tf.device('/CPU:0')" in where["findings"][0]["title"]
    assert where["findings"][0]["evidence"]["weights_on_cpu_bytes"] == 576


def test_ops_without_a_gpu_kernel_are_named():
    string_op = {"node": "model/StringToNumber", "type": "StringToNumber", "device": JOB + "CPU:0", "mode": "graph"}
    result = summarise_audit(raw(["/device:CPU:0", "/device:GPU:0"], var_device="GPU:0", op_device="GPU:0",
                                 kernels={"StringToNumber": ["CPU"]}, extra_ops=[string_op]))
    assert result["cpu_fallback_ops"] == ["StringToNumber"]
    assert [f["id"] for f in result["findings"]] == ["cpu_fallback_ops"]
    assert result["ops_by_device"] == {"GPU:0": 2, "CPU:0": 1}


def test_placement_log_between_the_markers_is_parsed():
    log = "\n".join([
        "I0000 00:00:1.0 1 placer.cc:162] loading/Op: (VarHandleOp): " + JOB + "CPU:0",
        PROBE_BEGIN,
        "I0000 00:00:1.1 1 placer.cc:162] model/dense/MatMul: (MatMul): " + JOB + "GPU:0",
        "model/dense/MatMul: (MatMul): " + JOB + "GPU:0",  # the same line, also printed plainly
        "I0000 00:00:1.1 1 placer.cc:162] input: (_Arg): " + JOB + "CPU:0",
        "I0000 00:00:1.2 1 execute.cc:1775] Executing op Relu in device " + JOB + "CPU:0",
        PROBE_END,
        "I0000 00:00:1.3 1 execute.cc:1775] Executing op Cast in device " + JOB + "CPU:0",
    ])
    ops = placements(log)
    assert [(o["type"], o["device"].rsplit(":", 2)[-2:], o["mode"]) for o in ops] == [
        ("MatMul", ["GPU", "0"], "graph"), ("MatMul", ["GPU", "0"], "graph"), ("Relu", ["CPU", "0"], "eager")]
    assert placements("no markers") == []


def test_load_errors_are_one_clear_line():
    custom = TypeError("Could not locate class 'Twice'. Make sure custom classes are decorated")
    assert "custom objects that cannot be imported here (Twice)" in load_error(custom, "keras")
    assert "weights-only" in load_error(ValueError("No model config found in the file at x"), "h5")
    truncated = OSError("Unable to synchronously open file (truncated file: eof = 3000)")
    assert "truncated or not a h5 model" in load_error(truncated, "h5")


def test_model_format(tmp_path):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "m.keras").write_bytes(b"")
    (tmp_path / "m.H5").write_bytes(b"")
    (tmp_path / "m.txt").write_text("hi")
    assert [model_format(tmp_path / n) for n in ("sm", "m.keras", "m.H5")] == ["savedmodel", "keras", "h5"]
    for name, message in (("m.txt", "not a model"), ("nope.keras", "no such file"), (".", "without saved_model.pb")):
        with pytest.raises(TensorgaugeError, match=message):
            model_format(tmp_path / name)


def run_with(host=None, job=None, **kw):
    return RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=10.0,
                     env={"host": host or {}, "job": job or {}}, **kw)


def test_driver_gpu_invisible_to_a_cpu_only_build():
    record = run_with(host={"nvidia_driver": "550.54", "gpus": ["NVIDIA H100"]},
                      job={"gpus_visible": 0, "tf_build": {"is_cuda_build": False}})
    (finding,) = placement_findings(record, [], [])
    assert finding.id == "gpu_not_visible" and "CPU-only build" in finding.title
    assert "tensorflow[and-cuda]" in finding.fix and "NVIDIA H100" in finding.title


def test_driver_gpu_invisible_to_a_cuda_build_names_the_versions():
    record = run_with(host={"nvidia_driver": "470.1", "gpus": ["Tesla T4"]},
                      job={"gpus_visible": 0, "tf_build": {"is_cuda_build": True, "cuda_version": "12.5.1",
                                                           "cudnn_version": "9"}})
    (finding,) = placement_findings(record, [], [])
    assert "CUDA 12.5.1 / cuDNN 9" in finding.title and "driver 470.1" in finding.title


def test_nothing_flagged_without_a_gpu():
    record = run_with(host={"nvidia_driver": None, "gpus": []}, job={"gpus_visible": 0})
    events = [Event(t=1.0, pid=1, kind="placement", data={"after": "fit", "devices": {"CPU:0": {"bytes": 9}}})]
    assert placement_findings(record, events, []) == []


def gpu_fit(util):
    events = [Event(t=1.0, pid=1, kind="phase_begin", data={"id": 1, "name": "fit", "phase_kind": "fit", "cpu": 0.0}),
              Event(t=4.0, pid=1, kind="phase_end", data={"id": 1, "cpu": 3.0})]
    from tensorgauge.model import GpuReading

    samples = [Sample(t=1.0 + 0.1 * i, cpu_seconds=1.0 + 0.1 * i, cores_busy=1.0, rss_bytes=1, threads=1, processes=1,
                      gpus=[GpuReading(index=0, name="H100", util_percent=util, memory_used_bytes=1,
                                       memory_total_bytes=2, power_watts=1.0)]) for i in range(31)]
    return events, build_phases(events, samples, end=5.0)


def test_training_on_the_cpu_with_a_visible_gpu():
    record = run_with(host={"gpus": ["H100"]}, job={"gpus_visible": 1})
    events, phases = gpu_fit(util=0.0)
    events.append(Event(t=4.0, pid=1, kind="placement",
                        data={"after": "fit", "devices": {"CPU:0": {"bytes": 800, "variables": 4}}}))
    assert [f.id for f in placement_findings(record, events, phases)] == ["variables_on_cpu", "gpu_unused"]
    events, phases = gpu_fit(util=85.0)
    assert placement_findings(record, events, phases) == []


def test_host_device_copies_per_step():
    record = run_with(host={"gpus": ["H100"]}, job={"gpus_visible": 1})
    probe = Event(t=2.0, pid=1, kind="input_probe",
                  data={"step_seconds": [0.01] * 10, "copies": 120, "copy_seconds": 0.02})
    (finding,) = placement_findings(record, [probe], [])
    assert finding.id == "host_device_copies" and finding.evidence["copies_per_step"] == 12.0
    probe.data["copies"] = 20  # two a step: the batch in, the loss out
    assert placement_findings(record, [probe], []) == []
