"""Pages of the findings about where the work runs: the GPU the job should use, and the weights on it."""

from __future__ import annotations

from tensorgauge.analyse import placement as p
from tensorgauge.analyse.rule_docs.base import RuleDoc
from tensorgauge.model import Finding


def _made(finding: Finding | None) -> Finding:
    assert finding is not None, "the example's inputs must make the rule fire"
    return finding


DOCS = (
    RuleDoc(
        id="gpu_not_visible", category="placement",
        summary="The NVIDIA driver shows a GPU, but the job's framework lists none.",
        meaning="The job ran on the CPU although the machine has a GPU. The usual reasons: a CPU-only build "
                "(`tensorflow-cpu`, a PyTorch wheel without CUDA, JAX without its CUDA plugin), or CUDA/cuDNN "
                "libraries of another version than the framework was built for, or a driver too old for them.",
        measured="The driver's GPUs come from NVML (the `[gpu]` extra), the framework's from the job: "
                 "TensorFlow's physical devices and build information, or the Keras backend's devices.",
        thresholds=("high: NVML shows a GPU and the framework that runs the model lists none",),
        fix="The finding names the reason and the install line: for TensorFlow on Linux "
            f"`{p.INSTALL_CUDA}`; for a CUDA build, the CUDA and cuDNN versions it needs.",
        check="`python -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\"` lists the "
              "GPU; `tensorgauge env` shows it under the job's devices; a new run has GPU columns in `show`.",
        example=_made(p.gpu_not_visible(
            {"gpus": ["NVIDIA H100 80GB HBM3"], "nvidia_driver": "580.65"},
            {"gpus_visible": 0, "devices_physical": ["CPU:0"], "tf_build": {"is_cuda_build": False}}))),
    RuleDoc(
        id="variables_on_cpu", category="placement",
        summary="Most of the model's weights are on the CPU although a GPU is visible.",
        meaning="Each call then copies the weights to the GPU, or the work runs on the CPU. Loading a model "
                "under a CPU device scope does this; by default `tf.saved_model.load` and "
                "`keras.saving.load_model` put variables on the GPU when one is visible.",
        measured="After each `fit` and each load (`load_model`, `load_weights`, `tf.saved_model.load`, a "
                 "checkpoint restore) the hook records the bytes of the model's variables on each device.",
        thresholds=("high: more than half of the weight bytes are on the CPU while the framework sees a GPU",),
        fix="Load without a CPU device scope, or under `with tf.device('/GPU:0')` (or `keras.device('gpu:0')`).",
        check="`tensorgauge devices model.keras` lists every variable with its device; `--device /CPU:0` shows "
              "the effect of a CPU scope.",
        example=p.variables_on_cpu(84 << 20, 88 << 20, "/CPU:0", {})),
    RuleDoc(
        id="gpu_unused", category="placement",
        summary="The framework sees a GPU, but training ran on the CPU.",
        meaning="The GPU stayed almost idle while the CPU worked: a device scope, `CUDA_VISIBLE_DEVICES` or "
                "`tf.config.set_visible_devices` kept the model off it, or the model was moved to the CPU.",
        measured="The fit's mean GPU utilisation (NVML, sampled with every sample) against its cores busy.",
        thresholds=(
            f"high: the GPU under {p.GPU_IDLE_UTIL:g}% busy on average during a fit of a second or more that "
            "kept half a core or more busy",
        ),
        fix="Look for `with tf.device('/CPU:0')` (or `keras.device('cpu')`, `jax.default_device`, "
            "`.to('cpu')`) around the model's creation or fit, and for `CUDA_VISIBLE_DEVICES` hiding the GPU.",
        check="`tensorgauge devices MODEL` shows where the weights and ops are; a new run's `show` has the fit's "
              "GPU utilisation in the phase table.",
        example=Finding(
            id="gpu_unused", severity="high",
            title="TensorFlow sees 1 GPU(s) but training ran on the CPU: GPU busy 0% on average, 1.85 cores busy",
            fix="Look for a with tf.device('/CPU:0') scope around the model or fit, CUDA_VISIBLE_DEVICES or "
                "tf.config.set_visible_devices hiding the GPU from this process; run 'tensorgauge devices MODEL' "
                "to see where the weights and ops are.")),
    RuleDoc(
        id="host_device_copies", category="placement",
        summary="Many copies between host and GPU in every training step.",
        meaning="A step needs one or two copies (its batch). More means ops without a GPU kernel, `.numpy()` "
                "or Python scalars inside the step, or data moving back and forth between devices.",
        measured="With `--diagnose` on a GPU, a profiler window over training steps counts the host-to-device "
                 "and device-to-host copies and their time.",
        thresholds=(f"moderate: {p.COPIES_PER_STEP} or more copies a step",),
        fix="Keep the data on one device: move ops without a GPU kernel (strings, `py_function`, some image "
            "ops) into the tf.data pipeline, avoid `.numpy()` and Python scalars inside the step, and end the "
            "pipeline with `.prefetch` so the one batch copy overlaps compute.",
        check="`tensorgauge run --diagnose -- python train.py` again: the copies per step in the finding's "
              "evidence, or no finding.",
        example=Finding(
            id="host_device_copies", severity="moderate",
            title="14 host<->GPU copies a step (2.3 ms)",
            fix="Keep the data on one device: move ops without a GPU kernel (string, py_function, some image ops) "
                "into the tf.data pipeline, avoid .numpy() and Python scalars inside the step, and end the input "
                "pipeline with .prefetch so the one batch copy overlaps compute.",
            expected_gain="the copy time per step")),
)
