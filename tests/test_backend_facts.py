"""Keras' JAX and PyTorch backends on fakes: devices named alike, the GPUs the job's framework
sees, the fit's input wait timed in Keras' iterator, eager steps on JAX, and a compare of two
backends split into first step, input and compute."""

from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from test_compare import side
from test_placement import gpu_fit, placement_findings, run_with

from tensorgauge.analyse.compare import compare
from tensorgauge.analyse.diagnose import eager_execution, thread_limited
from tensorgauge.analyse.findings import find
from tensorgauge.analyse.phases import build_phases
from tensorgauge.hook import fit_input
from tensorgauge.hook.facts import device_name
from tensorgauge.hook.placement import by_device
from tensorgauge.model import Event, Phase
from tensorgauge.monitoring.tryfixes import applicable


def test_devices_are_named_alike_on_every_backend():
    assert device_name("/job:localhost/replica:0/task:0/device:GPU:1") == "GPU:1"
    assert device_name("cuda:0") == "GPU:0" and device_name("cpu") == "CPU:0"
    assert device_name(SimpleNamespace(type="cuda", index=2)) == "GPU:2"  # a torch.device
    assert device_name(SimpleNamespace(type="cpu", index=None)) == "CPU:0"
    assert device_name(SimpleNamespace(platform="gpu", id=1)) == "GPU:1"  # a JAX Device
    assert device_name(SimpleNamespace(platform="cpu", id=0)) == "CPU:0"
    assert device_name(None) == "unknown"

    @dataclass(frozen=True)
    class JaxDevice:
        platform: str
        id: int

    class JaxArray:  # a Keras variable's value on JAX: the devices holding it
        def devices(self):
            return {JaxDevice("gpu", 0)}

    torch_value = SimpleNamespace(device=SimpleNamespace(type="cuda", index=0))
    variables = [SimpleNamespace(value=JaxArray(), shape=(4, 2), dtype="float32"),
                 SimpleNamespace(value=torch_value, shape=(3,), dtype="float32"),
                 SimpleNamespace(device="/device:CPU:0", shape=(2,), dtype="float64")]  # a tf.Variable
    assert by_device(variables) == {"GPU:0": {"bytes": 44, "variables": 2}, "CPU:0": {"bytes": 16, "variables": 1}}


def test_a_cpu_only_pytorch_is_named_not_tensorflow():
    host = {"nvidia_driver": "550.54", "gpus": ["NVIDIA H100"]}
    # TensorFlow (imported by Keras' save) sees no GPU; the model runs on PyTorch, which says what it sees.
    job = {"keras_backend": "torch", "gpus_visible": 0, "tf_build": {"is_cuda_build": False},
           "backend_gpus": 0, "backend_cuda": None, "backend_devices": ["CPU:0"]}
    (finding,) = placement_findings(run_with(host=host, job=job), [], [])
    assert finding.id == "gpu_not_visible" and "but PyTorch does not" in finding.title
    assert "CPU-only build" in finding.title and "tensorflow[and-cuda]" not in finding.fix
    assert finding.evidence["backend_cuda"] is None
    seen = {**job, "backend_gpus": 1, "backend_cuda": "12.8"}
    assert placement_findings(run_with(host=host, job=seen), [], []) == []  # PyTorch sees it: TF's view is moot
    (jax,) = placement_findings(run_with(host=host, job={**job, "keras_backend": "jax"}), [], [])
    assert "but JAX does not" in jax.title and "jax[cuda12]" in jax.fix


def test_training_on_the_cpu_under_pytorch_with_a_gpu_it_sees():
    job = {"keras_backend": "torch", "gpus_visible": 0, "backend_gpus": 1, "backend_cuda": "12.8"}
    events, phases = gpu_fit(util=0.0)
    events.append(Event(t=4.0, pid=1, kind="placement",
                        data={"after": "fit", "devices": {"CPU:0": {"bytes": 800, "variables": 4}}}))
    cpu, unused = placement_findings(run_with(host={"gpus": ["H100"]}, job=job), events, phases)
    assert cpu.id == "variables_on_cpu" and "PyTorch sees a GPU" in cpu.title and ".to('cpu')" in cpu.fix
    assert unused.id == "gpu_unused" and unused.title.startswith("PyTorch sees 1 GPU(s)")
    assert unused.evidence["weights_by_device"] == {"CPU:0": 800}
    unseen = placement_findings(run_with(host={"gpus": ["H100"]}, job={**job, "backend_gpus": 0}), events, phases)
    assert [f.id for f in unseen] == ["gpu_not_visible"]  # a GPU PyTorch cannot see is not one it leaves unused


def test_the_fits_own_iterator_is_timed_and_validations_is_not():
    class EpochIterator:
        def _get_iterator(self):
            return [1, 2, 3]

    timed = fit_input._timed(EpochIterator._get_iterator)
    clock = fit_input._pending = fit_input.InputClock()
    training, validation = EpochIterator(), EpochIterator()
    assert list(timed(training)) == [1, 2, 3]
    assert list(timed(validation)) == [1, 2, 3] and not isinstance(timed(validation), fit_input.TimedIterator)
    assert list(timed(training)) == [1, 2, 3]  # the second epoch: the same clock
    assert clock.batches == 6 and clock.seconds >= 0 and clock.first_seconds is not None
    assert fit_input._pending is None


def test_a_fit_waiting_in_keras_iterator_on_jax_is_input_bound(events):
    listener = fit_input._InputTimer("jax", fit_input.InputClock())
    listener.clock.batches, listener.clock.seconds, listener.clock.first_seconds = 101, 0.2 + 0.05, 0.05
    listener.on_train_end(model=None)
    (sent,) = [e for e in events() if e["kind"] == "fit_input"]
    data = {k: sent[k] for k in ("backend", "batches", "seconds", "first_seconds")}
    assert data == {"backend": "jax", "batches": 101, "seconds": 0.25, "first_seconds": 0.05}
    phase_events = [Event(t=1.0, pid=1, kind="phase_begin", data={"id": 1, "name": "fit", "phase_kind": "fit"}),
                    Event(t=1.1, pid=1, kind="step_digest", data={"phase": 1, "count": 0}),
                    Event(t=5.0, pid=1, kind="fit_input", data=data),
                    Event(t=5.0, pid=1, kind="phase_end", data={"id": 1})]
    phases = build_phases(phase_events, [], end=6.0)
    phases[0].steps, phases[0].step_seconds_p50 = 100, 0.008  # 2 ms of each 8 ms step in the iterator
    record = run_with(host={"cores_allowed": 2.0})
    (finding,) = find(record, [], phase_events, phases, category="performance")
    assert finding.id == "input_bound" and finding.severity == "high"
    assert finding.evidence["input_wait_seconds_per_step"] == pytest.approx(0.002)
    assert "converting it to jax tensors" in finding.title and "do not wrap them in tf.data" in finding.fix
    assert "1.3x" in finding.expected_gain


def test_eager_steps_on_jax_are_found_and_on_pytorch_are_not():
    fit = Phase(name="fit", kind="fit", start=0.0, end=5.0, steps=100, step_seconds_p50=0.02)
    jax = {"backend": "jax", "run_eagerly": False, "jit_compile": "False"}
    finding = eager_execution(jax, fit, [])
    assert finding is not None and "runs eagerly on JAX (jit_compile=False)" in finding.title
    assert eager_execution({**jax, "jit_compile": "True"}, fit, []) is None
    assert eager_execution({"backend": "torch", "run_eagerly": True, "jit_compile": "False"}, fit, []) is None
    tf = eager_execution({"backend": "tensorflow", "run_eagerly": True, "jit_compile": "False"}, fit, [])
    assert tf is not None and "model.run_eagerly" in tf.title
    # --try-fixes: on JAX no_eager turns jit back on; no_jit (XLA off) is TensorFlow's alone.
    assert applicable(jax, {}, 2.0)[0] == ["no_eager"]
    assert applicable({"backend": "jax", "jit_compile": "True"}, {}, 2.0)[0] == []
    assert applicable({"backend": "tensorflow", "jit_compile": "True"}, {}, 2.0)[0] == ["no_jit"]


def test_tensorflows_thread_pools_are_not_blamed_for_a_jax_fit():
    fit = Phase(name="fit", kind="fit", start=0.0, end=5.0, cores_busy_mean=1.0, steps=100, step_seconds_p50=0.02)
    job = {"thread_env": {"TF_NUM_INTRAOP_THREADS": "1"}}
    found = thread_limited({"backend": "tensorflow"}, job, fit, 4.0)
    assert found is not None and found.title.startswith("TensorFlow is held to 1 of 4 CPUs")
    assert thread_limited({"backend": "jax"}, job, fit, 4.0) is None
    fixes, not_tried = applicable({"backend": "jax", "intra_op_threads": 1}, job, 4.0)
    assert "threads" not in fixes and "do not run a jax fit" in not_tried["threads"]


def _backend_side(label, backend, first, p50, wait, compile_mode, fit_end=6.0):
    a = side(label, job={"keras_backend": backend, "backend_version": "1"},
             phases=[("import keras", "import", 0.1, 2.0), ("fit", "fit", 3.0, fit_end),
                     ("evaluate", "evaluate", fit_end, fit_end + 0.2)])
    a.report.events[:] = [e for e in a.report.events if e.kind != "bench_result"]
    a.report.events.append(Event(t=2.5, pid=1, kind="fit_config", data={"backend": backend, **compile_mode}))
    fit = next(p for p in a.report.phases if p.kind == "fit")
    fit.steps, fit.step_seconds_first, fit.step_seconds_p50, fit.cpu_seconds = 100, first, p50, 2.0
    a.report.input_split = {"measured": True, "input_wait_seconds": wait}
    return a


def test_two_backends_compare_by_first_step_input_and_compute():
    a = _backend_side("a", "tensorflow", 0.6, 0.0014, 0.0001, {"run_eagerly": False, "jit_compile": "False"})
    b = _backend_side("b", "jax", 0.3, 0.0005, 0.00013, {"run_eagerly": False, "jit_compile": "True"}, fit_end=4.0)
    evaluate = next(p for p in b.report.phases if p.kind == "evaluate")
    evaluate.step_seconds_first = 0.01  # 50x faster, but over a phase of 0.2 s: fit changed more time
    result = compare(a, b)
    differences = {d["cause"]: (d["a"], d["b"]) for d in result.environment}
    assert differences["compile"] == ("tf.function graph", "jax.jit (XLA)")
    assert differences["input"][1] == "Keras' Python iterator, converted to jax tensors"
    figures = {r.name: round(r.slowdown, 2) for r in result.results}
    assert figures["fit first step (trace, compile)"] == 0.5 and figures["fit step p50"] == pytest.approx(0.36, abs=0.01)
    assert figures["fit input per step"] == 1.3 and figures["fit compute per step"] == pytest.approx(0.28, abs=0.01)
    assert result.largest.name == "fit" and result.headline == "They differ most in fit: B is 3.00x faster (3.00 s -> 1.00 s)."
    backend = next(e for e in result.explanations if e["cause"] == "backend")
    assert "the input (making each batch and converting it) took 100 µs -> 130 µs" in backend["text"]
    assert result.explanations[0]["cause"] == "backend"
    data_input = next(e for e in result.explanations if e["cause"] == "input")
    assert [r["name"] for r in data_input["affected"]] == ["fit input per step"]
    assert data_input["score"] == pytest.approx(0.0212, abs=1e-3)  # ranked by what it does to the 1.4 ms step
    assert result.to_dict()["headline"] == result.headline


def test_each_phase_has_the_jobs_own_gpu_memory():
    from tensorgauge.model import GpuReading, Sample

    def sample(t, job):
        return Sample(t=t, cpu_seconds=t, cores_busy=1.0, rss_bytes=1, threads=1, processes=1,
                      gpus=[GpuReading(index=0, name="H100", util_percent=50.0, memory_used_bytes=8 << 30,
                                       memory_total_bytes=80 << 30, power_watts=1.0, job_memory_bytes=job)])

    events = [Event(t=1.0, pid=1, kind="phase_begin", data={"id": 1, "name": "fit", "phase_kind": "fit"}),
              Event(t=3.0, pid=1, kind="phase_end", data={"id": 1}),
              Event(t=3.0, pid=1, kind="phase_begin", data={"id": 2, "name": "predict", "phase_kind": "predict"}),
              Event(t=4.0, pid=1, kind="phase_end", data={"id": 2})]
    samples = [sample(1.0 + 0.5 * i, job) for i, job in enumerate([1 << 30, 3 << 30, 2 << 30, None, 1 << 29, 1 << 29])]
    fit, predict = build_phases(events, samples, end=4.0)
    assert fit.gpu_memory_peak_bytes == 8 << 30  # the device's, every process's
    assert fit.gpu_job_memory_peak_bytes == 3 << 30 and predict.gpu_job_memory_peak_bytes == 1 << 29


def test_the_imports_that_outlast_training_are_named():
    from tensorgauge.analyse.account import account
    from tensorgauge.analyse.summary import summarise

    events = [Event(t=0.0, pid=1, kind="phase_begin", data={"id": 1, "name": "import keras", "phase_kind": "import"}),
              Event(t=2.0, pid=1, kind="phase_end", data={"id": 1}),
              Event(t=2.0, pid=1, kind="phase_begin", data={"id": 2, "name": "fit", "phase_kind": "fit"}),
              Event(t=2.5, pid=1, kind="phase_end", data={"id": 2}),
              Event(t=2.5, pid=1, kind="phase_begin", data={"id": 3, "name": "import tensorflow",
                                                             "phase_kind": "import"}),
              Event(t=3.5, pid=1, kind="phase_end", data={"id": 3})]
    phases = build_phases(events, [], end=3.8)
    text = "\n".join(account(phases, summarise(run_with(), []), 3.8, 2.0))
    assert "Importing Keras and TensorFlow (3.00 s) took longer than training (500.0 ms)" in text
