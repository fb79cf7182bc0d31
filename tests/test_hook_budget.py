"""The job's side of a budget, with fakes for TensorFlow's GPU configuration and Keras."""

from types import SimpleNamespace

from tensorgauge.hook import budget, dataset_facts


class FakeConfig:
    """tf.config for a machine with ``gpus`` GPUs (a fake device: no GPU is lent here)."""

    def __init__(self, gpus, initialised=False):
        self.gpus, self.initialised, self.limits = gpus, initialised, {}

    def list_physical_devices(self, kind):
        return [f"/physical_device:GPU:{i}" for i in range(self.gpus)] if kind == "GPU" else []

    def set_logical_device_configuration(self, device, configs):
        if self.initialised:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.limits[device] = configs[0].memory_limit

    LogicalDeviceConfiguration = staticmethod(lambda memory_limit: SimpleNamespace(memory_limit=memory_limit))


def test_gpu_memory_limit_is_set_on_every_gpu(events, monkeypatch):
    monkeypatch.setenv(budget.GPU_MEMORY_ENV, str(8 << 30))
    tf = SimpleNamespace(config=FakeConfig(gpus=2))
    budget.apply_gpu_memory_limit(tf)
    assert tf.config.limits == {"/physical_device:GPU:0": 8192, "/physical_device:GPU:1": 8192}
    (event,) = events()
    assert event["kind"] == "budget_gpu_memory" and event["gpus"] == 2 and event["error"] is None


def test_gpu_memory_limit_too_late_or_without_gpu_is_reported(events, monkeypatch):
    monkeypatch.setenv(budget.GPU_MEMORY_ENV, str(1 << 30))
    budget.apply_gpu_memory_limit(SimpleNamespace(config=FakeConfig(gpus=1, initialised=True)))
    budget.apply_gpu_memory_limit(SimpleNamespace(config=FakeConfig(gpus=0)))
    late, none = events()
    assert "cannot be modified" in late["error"] and none["gpus"] == 0 and none["error"] is None
    monkeypatch.delenv(budget.GPU_MEMORY_ENV)
    budget.apply_gpu_memory_limit(SimpleNamespace(config=FakeConfig(gpus=1)))
    assert events() == []  # no budget, nothing touched


def test_stop_request_is_a_file_in_the_monitors_private_folder(tmp_path, monkeypatch):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    stop = private / "stop"
    monkeypatch.setenv(budget.STOP_FILE_ENV, str(stop))
    assert not budget.stop_requested()
    stop.write_text("")
    assert budget.stop_requested()
    monkeypatch.delenv(budget.STOP_FILE_ENV)
    assert not budget.stop_requested()


def test_a_stop_file_anyone_could_have_made_is_not_trusted(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    (shared / "stop").write_text("")
    monkeypatch.setenv(budget.STOP_FILE_ENV, str(shared / "stop"))
    assert not budget.stop_requested()
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "stop").symlink_to(shared / "stop")  # a link, even in the right folder
    monkeypatch.setenv(budget.STOP_FILE_ENV, str(private / "stop"))
    assert not budget.stop_requested()


def test_nbytes_of_nested_inputs():
    import numpy as np

    arrays = {"a": np.zeros((10, 4), "float32"), "b": (np.zeros(5, "int64"), np.zeros(3, "int8"))}
    assert dataset_facts.nbytes(arrays) == 160 + 40 + 3
    assert dataset_facts.nbytes([1.0, 2.0]) == 0
