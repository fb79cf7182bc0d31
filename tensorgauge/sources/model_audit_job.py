"""Runs in the subprocess of ``tensorgauge devices``: load a model, list its
variables, call it once with TensorFlow's placement log on and once under the
profiler, and print the raw facts as one JSON line on stdout.

Argument: a JSON request ``{"path", "format", "device", "input_shapes", "logical_cpus"}``.
The placement log (C++ logging on file descriptor 2) is captured by pointing
fd 2 at a temporary file before TensorFlow loads; marker lines written between
the steps tell the probe call's lines from the loading's.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import time

PROBE_BEGIN, PROBE_END = "@@tensorgauge-probe-begin", "@@tensorgauge-probe-end"
# The placer logs "NODE: (TYPE): DEVICE" (to stderr through absl, after "] "), eager execution
# "Executing op TYPE in device DEVICE".
PLACED = re.compile(r"(?:^|\] )([^\s:][^:]*): \(([^)]+)\): (/job:\S+)$")
EXECUTED = re.compile(r"Executing op (\S+) in device (\S+)")
TIMED_CALLS = 3


class AuditError(Exception):
    """A problem with the model, said in one line."""


def _mark(text: str) -> None:
    os.write(2, (text + "\n").encode())


def load_error(exc: BaseException, fmt: str) -> str:
    """One line on why a model did not load."""
    text = f"{exc}".strip().splitlines()[0] if f"{exc}".strip() else type(exc).__name__
    lowered = str(exc).lower()
    if "custom_objects" in lowered or "could not locate" in lowered or "unknown layer" in lowered \
            or "unknown object" in lowered:
        names = sorted(set(re.findall(r"(?:locate|Unknown \w+:?) (?:class |function )?'([\w.>]+)'", str(exc))))
        what = ", ".join(names) if names else text[:120]
        return (f"the model needs custom objects that cannot be imported here ({what}); load it where the "
                "code defining them is importable, registered with @keras.saving.register_keras_serializable()")
    if fmt == "h5" and "no model config" in lowered:
        return "a weights-only .h5 file (save_weights), not a model: load it into the model's code instead"
    if isinstance(exc, (OSError, EOFError)) or "truncated" in lowered or "zip" in lowered or "signature" in lowered \
            or "unable to" in lowered or "parse" in lowered:
        return f"cannot read the model file, it is truncated or not a {fmt} model ({type(exc).__name__}: {text[:160]})"
    return f"cannot load the model ({type(exc).__name__}: {text[:200]})"


def load(tf, request: dict):
    fmt, path = request["format"], request["path"]
    scope = tf.device(request["device"]) if request.get("device") else contextlib.nullcontext()
    try:
        with scope:
            if fmt == "savedmodel":
                return tf.saved_model.load(path)
            import keras

            return keras.saving.load_model(path, compile=False)
    except Exception as exc:
        raise AuditError(load_error(exc, fmt)) from None


def variables(model) -> list[dict]:
    from tensorgauge.hook.facts import variable_bytes, variable_device, variables_of

    found, seen = [], set()
    for variable in variables_of(model):
        if id(variable) in seen:
            continue
        seen.add(id(variable))
        found.append({"name": str(getattr(variable, "path", None) or variable.name),
                      "shape": [int(d) for d in variable.shape], "dtype": str(getattr(variable.dtype, "name",
                                                                                      variable.dtype)),
                      "bytes": variable_bytes(variable), "device": variable_device(variable)})
    return found


def _shape(text: str) -> list[int]:
    try:
        return [int(d) for d in text.replace("x", ",").split(",") if d.strip()]
    except ValueError:
        raise AuditError(f"bad --input-shape {text!r}: give sizes separated by commas, e.g. 1,28,28,3") from None


def probe_call(tf, model, input_shapes: list[str]):
    """A function of no arguments that calls the model on zeros, and what it was given."""
    if input_shapes:
        inputs = [tf.zeros(_shape(s)) for s in input_shapes]
        args = inputs[0] if len(inputs) == 1 else inputs
        signature = model.signatures.get("serving_default") if hasattr(model, "signatures") else None
        if signature is not None and not callable(getattr(model, "__call__", None)):  # noqa: B004 (a restored attribute)
            return lambda: signature(args), [list(t.shape) for t in inputs]
        return tf.function(lambda: model(args)), [list(t.shape) for t in inputs]
    keras_inputs = getattr(model, "inputs", None)
    if keras_inputs:
        tensors = [tf.zeros([d or 1 for d in i.shape], getattr(i, "dtype", "float32")) for i in keras_inputs]
        compiled = tf.function(lambda: model(tensors[0] if len(tensors) == 1 else tensors))  # as predict runs it
        return compiled, [list(t.shape) for t in tensors]
    signature = getattr(model, "signatures", {}).get("serving_default")
    if signature is not None:
        _, specs = signature.structured_input_signature
        kwargs = {name: tf.zeros([d or 1 for d in spec.shape], spec.dtype) for name, spec in specs.items()}
        return lambda: signature(**kwargs), [list(t.shape) for t in kwargs.values()]
    raise AuditError("the model declares no input shapes: give them with --input-shape, e.g. --input-shape 1,28,28,3")


def placements(log: str) -> list[dict]:
    """The ops placed during the probe call, from TensorFlow's placement log."""
    try:
        segment = log.split(PROBE_BEGIN, 1)[1].split(PROBE_END, 1)[0]
    except IndexError:
        return []
    ops = []
    for line in segment.splitlines():
        placed = PLACED.search(line.strip())
        if placed:
            ops.append({"node": placed[1], "type": placed[2], "device": placed[3], "mode": "graph"})
            continue
        executed = EXECUTED.search(line)
        if executed:
            ops.append({"node": executed[1], "type": executed[1], "device": executed[2], "mode": "eager"})
    return [op for op in ops if not op["type"].startswith("_") and op["type"] != "NoOp"]


def timed_ops(tf, call) -> list[dict]:
    """Op durations from a profiler trace of TIMED_CALLS probe calls: host executor events are
    ``node:Type``; a GPU plane's events are its kernels and copies."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    logdir = tempfile.mkdtemp(prefix="tensorgauge-devices-")
    try:
        tf.profiler.experimental.start(logdir)
        for _ in range(TIMED_CALLS):
            call()
        tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(paths[0], "rb") as f:
            space.ParseFromString(f.read())
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    events = []
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        gpu = plane.name.startswith("/device:GPU:")
        for line in plane.lines:
            if not gpu and not line.name.startswith(("tf_Compute", "tf_inter_op", "tf_data")):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if gpu or ":" in name and not name.startswith(("Thread", "Executor")):
                    events.append({"name": name, "plane": plane.name, "line": line.name,
                                   "seconds": event.duration_ps / 1e12 / TIMED_CALLS})
    return events


def kernel_devices(op_types: set[str]) -> dict[str, list[str]]:
    """The device types each op type has a registered kernel for."""
    from tensorflow.python.framework import kernels

    found = {}
    for op_type in op_types:
        try:
            found[op_type] = sorted({k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel})
        except Exception:
            found[op_type] = []
    return found


def run(request: dict, log_path: str) -> dict:
    import tensorflow as tf

    if request.get("logical_cpus"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * int(request["logical_cpus"]))
    tf.debugging.set_log_device_placement(True)
    began = time.monotonic()
    model = load(tf, request)
    load_seconds = time.monotonic() - began
    call, shapes = probe_call(tf, model, request.get("input_shapes") or [])
    _mark(PROBE_BEGIN)
    try:
        call()
    except Exception as exc:
        raise AuditError(f"the probe call on zeros of shape {shapes} failed ({type(exc).__name__}: "
                         f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}); "
                         "give the input shape with --input-shape") from None
    _mark(PROBE_END)
    tf.debugging.set_log_device_placement(False)
    with contextlib.suppress(OSError):
        os.fsync(2)
    with open(log_path, errors="replace") as f:
        ops = placements(f.read())
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    on_cpu = {op["type"] for op in ops if "CPU" in op["device"]}
    build = {k: v for k, v in dict(tf.sysconfig.get_build_info()).items()
             if k in ("is_cuda_build", "cuda_version", "cudnn_version")}
    return {"tensorflow_version": tf.__version__, "tf_build": build,
            "devices": [d.name for d in tf.config.list_logical_devices()],
            "physical_gpus": len(tf.config.list_physical_devices("GPU")), "load_device": request.get("device"),
            "load_seconds": round(load_seconds, 3), "probe_input_shapes": shapes,
            "variables": variables(model), "ops": ops, "timed_ops": timed_ops(tf, call),
            "kernel_devices": kernel_devices(on_cpu) if gpus else {}}


def main() -> None:
    request = json.loads(sys.argv[1])
    log = tempfile.NamedTemporaryFile(prefix="tensorgauge-placement-", suffix=".log", delete=False)  # noqa: SIM115
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        result = run(request, log.name)
    except AuditError as exc:
        result = {"error": str(exc)}
    except Exception as exc:  # an audit bug or a TensorFlow failure: still one line
        result = {"error": f"the audit failed ({type(exc).__name__}: {str(exc).strip()[:200]})"}
    finally:
        os.dup2(saved, 2)
        log.close()
        os.unlink(log.name)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip TensorFlow's teardown: nothing is left to write


if __name__ == "__main__":
    main()
