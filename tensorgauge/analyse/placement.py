"""Where weights and ops run: the ``devices`` audit summarised, and placement findings
for a recorded run (pure: from raw facts and events).

Findings: ``gpu_not_visible`` (the driver has a GPU, the job's framework does not),
``gpu_unused`` (the framework sees a GPU, the work runs on the CPU),
``variables_on_cpu`` (weights on the CPU while a GPU is visible),
``host_device_copies`` (many host<->device copies per step). On a machine
without a GPU none applies: everything running on the CPU is expected there.
The framework is TensorFlow, or the Keras 3 backend (JAX, PyTorch) when the job runs on one.
"""

from __future__ import annotations

from collections import defaultdict

from tensorgauge.analyse.rules import RunFacts, rule
from tensorgauge.hook.facts import short_device
from tensorgauge.hook.protocol import InputProbe, Placement
from tensorgauge.model import Finding
from tensorgauge.units import format_bytes

TOP_OPS = 5
GPU_IDLE_UTIL = 5.0  # % mean GPU utilisation during fit under which the GPU counts as unused
COPIES_PER_STEP = 8  # host<->device copies per step worth reporting (a step's batch needs one or two)
INSTALL_CUDA = "pip install 'tensorflow[and-cuda]'"
FRAMEWORKS = {"jax": "JAX", "torch": "PyTorch"}  # Keras 3 backends other than TensorFlow, by KERAS_BACKEND


def framework(job: dict) -> str:
    """What runs the job's model: 'TensorFlow', 'JAX' or 'PyTorch'."""
    return FRAMEWORKS.get(job.get("keras_backend") or "", "TensorFlow")


def gpus_seen(job: dict) -> int | None:
    """The GPUs the job's framework sees (None when it has not said)."""
    return job.get("backend_gpus") if job.get("keras_backend") in FRAMEWORKS else job.get("gpus_visible")


def _op_device(event: dict, node_devices: dict[str, str]) -> str:
    node = event["name"].rsplit(":", 1)[0]
    if node in node_devices:
        return node_devices[node]
    plane = event.get("plane", "")
    return plane.rsplit("device:", 1)[-1] if plane.startswith("/device:") else "CPU:0"


def summarise_audit(raw: dict, host: dict | None = None) -> dict:
    """The ``devices`` result (schema ``tensorgauge.devices/1``) from the audit's raw facts;
    ``host``: the driver's view ({"gpus": NVML names, "nvidia_driver"}), to tell a machine
    without a GPU from one whose GPU TensorFlow cannot see."""
    variables = raw.get("variables") or []
    weights: dict[str, dict[str, int]] = defaultdict(lambda: {"bytes": 0, "variables": 0})
    for v in variables:
        weights[v["device"]]["bytes"] += v["bytes"]
        weights[v["device"]]["variables"] += 1
    ops = raw.get("ops") or []
    counts: dict[str, int] = defaultdict(int)
    node_devices = {}
    for op in ops:
        device = short_device(op["device"])
        counts[device] += 1
        node_devices[op["node"]] = device
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for event in raw.get("timed_ops") or []:
        op_type = event["name"].rsplit(":", 1)[-1]
        seconds[_op_device(event, node_devices)][op_type] += event["seconds"]
    top = {device: [{"type": t, "seconds": s} for t, s in sorted(by_type.items(), key=lambda kv: -kv[1])[:TOP_OPS]]
           for device, by_type in seconds.items()}
    gpus = [d for d in raw.get("devices") or [] if "GPU" in d]
    kernels = raw.get("kernel_devices") or {}
    fallbacks = sorted({op["type"] for op in ops if "CPU" in short_device(op["device"]) and gpus
                        and op["type"] in kernels and "GPU" not in kernels[op["type"]]})
    result = {"schema": "tensorgauge.devices/1", "path": raw.get("path"), "format": raw.get("format"),
              "tensorflow_version": raw.get("tensorflow_version"), "devices": raw.get("devices") or [],
              "load_device": raw.get("load_device"), "probe_input_shapes": raw.get("probe_input_shapes"),
              "variables": variables, "weights_by_device": dict(weights), "ops_by_device": dict(counts),
              "top_ops_by_device": top, "cpu_fallback_ops": fallbacks}
    hidden = gpu_not_visible(host or {}, {"tf_build": raw.get("tf_build"), "devices_physical": raw.get("devices"),
                                          "gpus_visible": len(gpus)})
    result["driver_gpus"] = (host or {}).get("gpus") or []
    result["findings"] = [f.to_dict() for f in ([hidden] if hidden else []) + audit_findings(result, raw)]
    result["note"] = (None if gpus else
                      "TensorFlow lists no GPU although the driver shows one: everything runs on the CPU "
                      "(see gpu_not_visible)." if hidden else
                      "No GPU exists here (TensorFlow lists none): everything runs on the CPU.")
    return result


def audit_findings(summary: dict, raw: dict) -> list[Finding]:
    gpus = [d for d in summary["devices"] if "GPU" in d]
    if not gpus:
        return []
    findings = []
    weights = summary["weights_by_device"]
    total = sum(w["bytes"] for w in weights.values())
    on_cpu = sum(w["bytes"] for d, w in weights.items() if d.startswith("CPU"))
    if total and on_cpu > total / 2:
        findings.append(variables_on_cpu(on_cpu, total, summary.get("load_device")))
    on_gpu = sum(n for d, n in summary["ops_by_device"].items() if d.startswith("GPU"))
    if summary["ops_by_device"] and on_gpu == 0:
        findings.append(Finding(
            id="gpu_unused", severity="high", title=f"A GPU is visible ({', '.join(gpus)}) but every op of the "
                                                    "probe call ran on the CPU",
            evidence={"ops_by_device": summary["ops_by_device"], "cpu_fallback_ops": summary["cpu_fallback_ops"]},
            fix="Load and call the model without a CPU device scope (or under with tf.device('/GPU:0')); "
                "check that no tf.config.set_visible_devices hides the GPU.",
            expected_gain=None))
    if summary["cpu_fallback_ops"]:
        findings.append(Finding(
            id="cpu_fallback_ops", severity="moderate",
            title=f"{len(summary['cpu_fallback_ops'])} op types have no GPU kernel and fell back to the CPU",
            evidence={"op_types": summary["cpu_fallback_ops"]},
            fix="Replace those ops with GPU-capable ones, or move them out of the model (e.g. into the tf.data "
                "pipeline), so the data does not cross between host and GPU inside each call.",
            expected_gain=None))
    return findings


BACKEND_PLACEMENT_FIX = (
    "Keras creates a model's variables on the backend's default device, the GPU when {name} sees one: look for "
    "a with keras.device('cpu') (or jax.default_device / torch.device scope) around the model's creation or "
    "loading{torch}, and create it under with keras.device('gpu:0') to choose.")


def variables_on_cpu(on_cpu: int, total: int, load_device: str | None, job: dict | None = None) -> Finding:
    job = job or {}
    scoped = f" (it was loaded under tf.device('{load_device}'))" if load_device and "CPU" in load_device else ""
    if job.get("keras_backend") in FRAMEWORKS:
        fix = BACKEND_PLACEMENT_FIX.format(name=framework(job), torch=", or a .to('cpu') on the model"
                                           if job["keras_backend"] == "torch" else "")
    else:
        fix = ("Load the model without a CPU device scope: tf.saved_model.load and keras.saving.load_model place "
               "variables on the GPU when one is visible. To choose, load under with tf.device('/GPU:0') (or "
               "keras.device('gpu:0')); for a SavedModel, tf.saved_model.LoadOptions(experimental_io_device=...) "
               "changes only where files are read, not where variables live.")
    return Finding(
        id="variables_on_cpu", severity="high",
        title=f"{format_bytes(on_cpu)} of {format_bytes(total)} of weights are on the CPU although {framework(job)} "
              f"sees a GPU{scoped}",
        evidence={"weights_on_cpu_bytes": on_cpu, "weights_bytes": total, "load_device": load_device,
                  "framework": framework(job)},
        fix=fix, expected_gain="no host-to-GPU copy of the weights in every call")


def _gpu_reason(host: dict, job: dict) -> tuple[str, str]:
    """Why TensorFlow cannot see the driver's GPU, and the fix."""
    build = job.get("tf_build") or {}
    if build.get("is_cuda_build") is False or (job.get("tf_build") is not None and not build.get("cuda_version")):
        return ("this TensorFlow is a CPU-only build (e.g. tensorflow-cpu, or a wheel without CUDA)",
                f"Install a CUDA build: {INSTALL_CUDA} (Linux), then check with "
                "python -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\".")
    cuda, cudnn = build.get("cuda_version"), build.get("cudnn_version")
    driver = host.get("nvidia_driver")
    return (f"TensorFlow was built for CUDA {cuda} / cuDNN {cudnn} and could not load them with driver {driver}: "
            "the CUDA or cuDNN libraries are missing or of another version, or the driver is too old for that CUDA",
            f"Install the matching libraries with {INSTALL_CUDA} (it pins CUDA {cuda} and cuDNN {cudnn}), or "
            "upgrade the driver to one that supports that CUDA; TensorFlow's start-up log names the library it "
            "could not load.")


def _backend_gpu_reason(job: dict) -> tuple[str, str]:
    """Why JAX or PyTorch cannot see the driver's GPU, and the fix."""
    if job.get("keras_backend") == "jax":
        return ("this JAX has no CUDA plugin (jax.devices() lists only the CPU)",
                "Install JAX with CUDA: pip install -U 'jax[cuda12]' (Linux), then check with "
                "python -c \"import jax; print(jax.devices())\".")
    if not job.get("backend_cuda"):
        return ("this PyTorch is a CPU-only build (torch.version.cuda is None)",
                "Install a CUDA build of PyTorch (the install selector on PyTorch's site gives the command for "
                "your CUDA), then check with python -c \"import torch; print(torch.cuda.is_available())\".")
    return (f"PyTorch was built for CUDA {job['backend_cuda']} and found no usable device: the driver is too old "
            "for that CUDA, or CUDA_VISIBLE_DEVICES hides the GPU",
            "Upgrade the driver to one that supports that CUDA (or install the PyTorch build for your driver's "
            "CUDA), and check CUDA_VISIBLE_DEVICES.")


def gpu_not_visible(host: dict, job: dict) -> Finding | None:
    """The driver (NVML) shows a GPU, the job's framework lists none: why, and the fix."""
    if not host.get("gpus") or gpus_seen(job) != 0:
        return None
    if job.get("keras_backend") in FRAMEWORKS:
        reason, fix = _backend_gpu_reason(job)
        evidence = {"backend": job["keras_backend"], "backend_devices": job.get("backend_devices"),
                    "backend_cuda": job.get("backend_cuda")}
    else:
        reason, fix = _gpu_reason(host, job)
        evidence = {"tf_build": job.get("tf_build"), "devices_physical": job.get("devices_physical")}
    return Finding(id="gpu_not_visible", severity="high",
                   title=f"The NVIDIA driver ({host.get('nvidia_driver')}) shows {', '.join(host['gpus'])} "
                         f"but {framework(job)} does not: {reason}",
                   evidence={"nvidia_driver": host.get("nvidia_driver"), "gpus": host["gpus"], **evidence},
                   fix=fix, expected_gain=None)


@rule("gpu_not_visible", category="placement")
def _gpu_not_visible(f: RunFacts) -> Finding | None:
    return gpu_not_visible(f.host, f.job)


@rule("variables_on_cpu", category="placement")
def _variables_on_cpu(f: RunFacts) -> Finding | None:
    placed = f.last(Placement)
    if not gpus_seen(f.job) or placed is None:
        return None
    held: dict[str, int] = {name: d["bytes"] for name, d in (placed.get("devices") or {}).items()
                            if isinstance(d, dict) and isinstance(d.get("bytes"), int) and d["bytes"] >= 0}
    total = sum(held.values())
    on_cpu = sum(b for name, b in held.items() if name.startswith("CPU"))
    return variables_on_cpu(on_cpu, total, None, f.job) if total and on_cpu > total / 2 else None


@rule("gpu_unused", category="placement")
def gpu_unused(f: RunFacts) -> Finding | None:
    visible, fit = gpus_seen(f.job), f.fit
    if not visible or fit is None or fit.wall_seconds < 1.0 or fit.gpu_util_mean is None:
        return None
    if fit.gpu_util_mean >= GPU_IDLE_UTIL or fit.cores_busy_mean < 0.5:
        return None
    placed = f.last(Placement)
    weights = {name: d.get("bytes") for name, d in ((placed or {}).get("devices") or {}).items() if isinstance(d, dict)}
    if f.job.get("keras_backend") in FRAMEWORKS:
        fix = ("Look for a with keras.device('cpu') scope (or jax.default_device, torch.device) around the model's "
               "creation or fit, a model moved with .to('cpu'), or CUDA_VISIBLE_DEVICES hiding the GPU.")
    else:
        fix = ("Look for a with tf.device('/CPU:0') scope around the model or fit, CUDA_VISIBLE_DEVICES or "
               "tf.config.set_visible_devices hiding the GPU from this process; run "
               "'tensorgauge devices MODEL' to see where the weights and ops are.")
    return Finding(
        id="gpu_unused", severity="high",
        title=f"{framework(f.job)} sees {visible} GPU(s) but training ran on the CPU: GPU busy "
              f"{fit.gpu_util_mean:.0f}% on average, {fit.cores_busy_mean:.2f} cores busy",
        evidence={"gpus_visible": visible, "fit_gpu_util_mean": fit.gpu_util_mean,
                  "fit_cores_busy_mean": round(fit.cores_busy_mean, 2), "weights_by_device": weights or None},
        fix=fix, expected_gain=None)


@rule("host_device_copies", category="placement")
def host_device_copies(f: RunFacts) -> Finding | None:
    if not gpus_seen(f.job):
        return None
    probe = next((p for p in f.payloads(InputProbe) if p.get("copies")), None)
    if not probe:
        return None
    steps = max(1, len(probe.get("step_seconds") or []))
    per_step = probe.get("copies", 0) / steps
    if per_step < COPIES_PER_STEP:
        return None
    return Finding(
        id="host_device_copies", severity="moderate",
        title=f"{per_step:.0f} host<->GPU copies a step ({probe.get('copy_seconds', 0) / steps * 1000:.1f} ms)",
        evidence={"copies_per_step": round(per_step, 1),
                  "copy_seconds_per_step": round(probe.get("copy_seconds", 0) / steps, 6)},
        fix="Keep the data on one device: move ops without a GPU kernel (string, py_function, some "
            "image ops) into the tf.data pipeline, avoid .numpy() and Python scalars inside the step, "
            "and end the input pipeline with .prefetch so the one batch copy overlaps compute.",
        expected_gain="the copy time per step")
