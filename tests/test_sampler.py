from tensorgauge.model import GpuReading
from tensorgauge.monitoring.sampler import PRIVATE_MEMORY_EVERY_SECONDS, Sampler
from tensorgauge.sources import MemoryReading, TreeReading
from tensorgauge.sources.nvml import NoGpus
from tensorgauge.testing import FakeClock, FakeProcessTree, FakeSystem


def reading(cpu, rss=100, threads=3):
    return TreeReading(cpu_seconds=cpu, rss_bytes=rss, threads=threads, processes=1, read_bytes=0, write_bytes=0)


def make(tree_readings, per_cpu=None, gpus=None):
    clock = FakeClock(500.0)
    tree = FakeProcessTree(readings=tree_readings, private=(80, 90))
    system = FakeSystem(per_cpu=per_cpu or [], mem=MemoryReading(mem_used_bytes=1, mem_available_bytes=2, mem_total_bytes=3))
    return Sampler(tree, system, gpus or NoGpus(), clock, t0=500.0), clock, tree


def test_cores_busy_is_cpu_delta_over_time_delta():
    sampler, clock, _ = make([reading(1.0), reading(1.5), reading(2.5)])
    first = sampler.sample()
    assert first.t == 0.0 and first.cores_busy is None
    clock.advance(0.25)
    second = sampler.sample()
    assert second.t == 0.25 and second.cores_busy == 2.0
    clock.advance(1.0)
    assert sampler.sample().cores_busy == 1.0


def test_per_cpu_percent_from_cumulative_busy_total():
    per_cpu = [[(10.0, 20.0), (5.0, 20.0)], [(10.5, 21.0), (5.0, 21.0)]]
    sampler, clock, _ = make([reading(0), reading(0)], per_cpu=per_cpu)
    assert sampler.sample().cpu_percent is None  # needs a previous reading
    clock.advance(0.1)
    assert sampler.sample().cpu_percent == [50.0, 0.0]


def test_private_memory_is_read_only_every_few_seconds():
    sampler, clock, tree = make([reading(0)] * 30)
    results = []
    for _ in range(30):
        results.append(sampler.sample().uss_bytes)
        clock.advance(0.5)
    # 15 s of samples at 0.5 s: reads at 0, 5, 10 s
    assert tree.private_calls == int(15 / PRIVATE_MEMORY_EVERY_SECONDS)
    assert results[0] == 80 and results[1] is None and results[10] == 80


def test_tree_gone_gives_none_and_memory_is_copied():
    sampler, _, _ = make([reading(0)])
    sample = sampler.sample()
    assert sample.mem_used_bytes == 1 and sample.mem_available_bytes == 2
    assert sampler.sample() is None


def test_gpu_readings_are_attached_with_the_trees_pids():
    class OneGpu:
        def read(self, pids=()):
            return [GpuReading(index=0, util_percent=50.0, job_memory_bytes=len(pids))]

    tree = reading(0)
    tree.pids = (7, 8)
    sampler, _, _ = make([tree], gpus=OneGpu())
    gpu = sampler.sample().gpus[0]
    assert gpu.util_percent == 50.0 and gpu.job_memory_bytes == 2  # the GPU source was asked about both


def test_slow_readings_once_a_second():
    sampler, clock, tree = make([reading(0)] * 12)
    memory = []
    for _ in range(12):
        memory.append(sampler.sample().mem_used_bytes)
        clock.advance(0.1)
    assert tree.io_requests == [i in (0, 10) for i in range(12)]
    assert [m is not None for m in memory] == tree.io_requests


def test_machine_swap_in_use_is_sampled_once_a_second_and_stored(tmp_path):
    from tensorgauge.model import RunRecord
    from tensorgauge.sources.system import PsutilSystem
    from tensorgauge.store import Store

    clock = FakeClock(500.0)
    system = FakeSystem(mem=MemoryReading(mem_used_bytes=1, mem_available_bytes=2, mem_total_bytes=3,
                                          swap_used_bytes=5 << 20))
    sampler = Sampler(FakeProcessTree(readings=[reading(0)] * 3), system, NoGpus(), clock, t0=500.0)
    first = sampler.sample()
    clock.advance(0.1)
    second = sampler.sample()
    assert first.swap_used_bytes == 5 << 20 and second.swap_used_bytes is None  # once a second
    store = Store.open(tmp_path / "runs.db")
    store.save_run(RunRecord(run_id="r", command=["x"], started_at="2026"))
    store.add("r", [first, second], [])
    assert [s.swap_used_bytes for s in store.samples("r")] == [5 << 20, None]
    real = PsutilSystem().memory()
    assert real is not None and real.swap_used_bytes is not None and real.swap_used_bytes >= 0
