"""The monitor's side of a budget, on hand-made samples."""

from tensorgauge.model import Sample
from tensorgauge.monitoring.budget import BudgetWatch
from tensorgauge.monitoring.limits import Budget

MIB = 1 << 20


def sample(t, rss):
    return Sample(t=t, cpu_seconds=0, cores_busy=None, rss_bytes=rss, threads=1, processes=1)


def test_soft_line_asks_once_then_kill_past_the_budget(tmp_path):
    stop = tmp_path / "stop"
    watch = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(stop), str(tmp_path / "ckpt"))
    kills = []
    watch.check(sample(1.0, 800 * MIB), lambda: kills.append(1))
    assert not stop.exists()
    watch.check(sample(1.1, 900 * MIB), lambda: kills.append(1))
    assert stop.exists() and watch.stop_requested_at == 1.1 and not kills
    watch.check(sample(1.2, 950 * MIB), lambda: kills.append(1))
    watch.check(sample(1.3, 1001 * MIB), lambda: kills.append(1))
    watch.check(sample(1.4, 1100 * MIB), lambda: kills.append(1))
    assert kills == [1] and "killed" in watch.reason and watch.peak_bytes == 1100 * MIB
    result = watch.result(9, None, False, None)
    assert result["stopped"] and not result["graceful"] and result["peak_t"] == 1.4


def test_graceful_result_and_environment(tmp_path):
    watch = BudgetWatch(Budget(max_memory_bytes=1000 * MIB, max_cpus=1.0, max_gpu_memory_bytes=2 * MIB),
                        str(tmp_path / "stop"), "/ckpt")
    env = watch.environment()
    assert env["TENSORGAUGE_CHECKPOINT_DIR"] == "/ckpt" and env["TF_NUM_INTRAOP_THREADS"] == "1"
    assert env["TENSORGAUGE_GPU_MEMORY_LIMIT"] == str(2 * MIB) and env["TENSORGAUGE_STOP_FILE"].endswith("stop")
    watch.check(sample(2.0, 950 * MIB), lambda: None)
    result = watch.result(None, 75, False, "/ckpt", hook_stopped=True)
    assert result["stopped"] and result["graceful"] and result["checkpoint"] == "/ckpt"
    assert "90%" in result["reason"] or "95%" in result["reason"]
    assert watch.result(None, 0, False, None)["stopped"] is False


def test_no_memory_budget_never_stops(tmp_path):
    watch = BudgetWatch(Budget(max_cpus=1.0), str(tmp_path / "stop"), None)
    watch.check(sample(1.0, 10**12), lambda: (_ for _ in ()).throw(AssertionError("killed")))
    assert watch.peak_bytes == 10**12 and not (tmp_path / "stop").exists()


def test_gpu_budget_is_verified_against_the_jobs_own_gpu_memory(tmp_path):
    from rich.console import Console

    from tensorgauge.model import GpuReading
    from tensorgauge.render.terminal import render_budget

    watch = BudgetWatch(Budget(max_gpu_memory_bytes=2 << 30), str(tmp_path / "stop"), None)
    for t, held in ((1.0, None), (1.1, (1 << 30, 1 << 29)), (1.2, (1 << 30, 0))):
        s = sample(t, 100 * MIB)
        s.gpus = [GpuReading(index=0, memory_used_bytes=70 << 30, job_memory_bytes=None)] if held is None else \
            [GpuReading(index=i, memory_used_bytes=70 << 30, job_memory_bytes=h) for i, h in enumerate(held)]
        watch.check(s, lambda: None)
    applied = watch.result(None, 0, False, None, {"gpus": 2, "error": None})
    assert applied["gpu_memory_peak_bytes"] == 3 << 29  # both GPUs, the job's own, not the device's 70 GiB
    assert not applied["stopped"]
    assert applied["enforced_by"] == ["TF logical GPU memory_limit", "NVML check of the job's GPU memory"]
    no_tf = watch.result(None, 0, False, None, None)
    assert no_tf["enforced_by"] == ["NVML check of the job's GPU memory"] and no_tf["gpu_memory_limit"] is None

    def shown(budget):
        console = Console(record=True, width=300)
        render_budget(console, budget)
        return console.export_text()

    text = shown(applied)
    assert "TensorFlow memory_limit on 2 GPU(s)" in text and "job's peak 1.5 GiB (NVML)" in text
    assert "over the budget" not in text
    over = shown({**applied, "gpu_memory_peak_bytes": 3 << 30})
    assert "over the budget: TensorFlow's limit leaves out the CUDA context" in over
    over = shown({**no_tf, "gpu_memory_peak_bytes": 3 << 30})
    assert "not applied: the job did not import TensorFlow" in over and "over the budget" in over
    assert "CUDA context" not in over


def test_a_gpu_budget_nothing_could_apply_says_so(tmp_path):
    from rich.console import Console

    from tensorgauge.render.terminal import render_budget

    watch = BudgetWatch(Budget(max_gpu_memory_bytes=2 << 30), str(tmp_path / "stop"), None)
    watch.check(sample(1.0, 100 * MIB), lambda: None)  # no GPU readings at all
    result = watch.result(None, 0, False, None, {"gpus": 0, "error": None})
    assert result["enforced_by"] == [] and result["gpu_memory_peak_bytes"] is None
    console = Console(record=True, width=300)
    render_budget(console, result)
    text = console.export_text()
    assert "no GPU visible to TensorFlow: nothing to limit" in text and "enforced by nothing" in text


def test_the_stop_request_never_follows_a_planted_link(tmp_path):
    """Even handed a path where a link was planted, the monitor creates its own file or nothing."""
    precious = tmp_path / "precious"
    precious.write_text("keep me")
    precious.chmod(0o600)
    (tmp_path / "stop").symlink_to(precious)
    watch = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "stop"), None)
    watch.check(sample(1.0, 950 * MIB), lambda: None)
    assert precious.read_text() == "keep me" and watch.stop_requested_at == 1.0


def test_a_runs_files_live_in_a_private_folder_and_go_with_it(tmp_path):
    import os
    import stat

    from tensorgauge.monitoring.run_files import RunFiles

    files = RunFiles("r")
    folder = os.lstat(files.directory)
    assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.getuid()
    assert stat.S_IMODE(os.lstat(files.events_path).st_mode) == 0o600
    files.remove()
    assert not os.path.exists(files.directory)
    from tensorgauge.hook.channel import Channel

    late = Channel(files.events_path)  # a process that outlived the run
    late.emit("exit")
    assert late.broken and not os.path.exists(files.events_path)


def test_exit_75_alone_or_a_kill_is_no_resumable_budget_stop(tmp_path):
    """The job's own exit 75 is not the budget's; a failed checkpoint or a kill leaves nothing to resume."""
    own = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "a"), "/ckpt")
    own.check(sample(1.0, 100 * MIB), lambda: None)
    assert own.result(None, 75, False, "/ckpt")["stopped"] is False
    asked = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "b"), "/ckpt")
    asked.check(sample(1.0, 950 * MIB), lambda: None)
    failed = asked.result(None, 75, False, None, hook_stopped=True)  # the checkpoint could not be written
    assert failed["stopped"] and failed["checkpoint"] is None
    killed = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "c"), "/ckpt")
    killed.check(sample(1.0, 1200 * MIB), lambda: None)
    result = killed.result(9, None, False, "/ckpt")
    assert result["stopped"] and not result["graceful"] and result["checkpoint"] is None


def test_show_says_a_budget_was_exceeded_never_enforced():
    import io

    from rich.console import Console

    from tensorgauge.render.terminal import render_budget

    def shown(budget):
        console = Console(file=io.StringIO(), width=300)
        render_budget(console, budget)
        return console.file.getvalue()

    cpus = shown({"max_cpus": 1.5, "cores_busy_mean": 1.92, "enforced_by": ["affinity [0, 1]"]})
    assert "exceeded: 1.92 cores used on average" in cpus and "enforced by" not in cpus
    memory = shown({"max_memory_bytes": 200 * MIB, "peak_bytes": 408 * MIB, "enforced_by": ["watchdog"]})
    assert "exceeded by 208.0 MiB (104%)" in memory and "enforced by" not in memory
    held = shown({"max_memory_bytes": 200 * MIB, "peak_bytes": 150 * MIB, "max_cpus": 1.0, "cores_busy_mean": 0.98,
                  "enforced_by": ["cgroup memory limit"]})
    assert "enforced by cgroup memory limit" in held and "exceeded" not in held


def test_a_budget_stop_is_never_a_success_whatever_a_wrapper_exits_with(tmp_path):
    """`sh -c "python train.py; true"`: the stopped Python's 75 or 137 became the shell's 0, and `run` exited 0."""
    from tensorgauge.monitoring.budget import run_exit_code

    asked = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "a"), "/ckpt")
    asked.check(sample(1.0, 950 * MIB), lambda: None)
    wrapped = asked.result(None, 0, False, "/ckpt", hook_stopped=True)  # the hook stopped it; the shell went on
    assert wrapped["graceful"] and wrapped["checkpoint"] == "/ckpt" and run_exit_code(wrapped, 0, False) == 75
    killed = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "b"), None)
    killed.check(sample(1.0, 1200 * MIB), lambda: None)
    stopped = killed.result(None, 0, False, None)  # the watchdog killed the Python, the shell exited 0 before it
    assert stopped["stopped"] and not stopped["graceful"] and run_exit_code(stopped, 0, False) == 137
    assert run_exit_code(killed.result(15, None, False, None), 128 + 15, True) == 128 + 15  # a signal's stands
    own = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "c"), None)
    own.check(sample(1.0, 10 * MIB), lambda: None)
    assert run_exit_code(own.result(None, 3, False, None), 3, False) == 3  # no stop: the job's own code


def test_a_kill_by_the_kernel_inside_the_jobs_cgroup_stops_the_whole_job(tmp_path):
    """The kernel's OOM kill of one process in the cgroup (the memory.oom_control count rising) ends the rest."""
    from tensorgauge.sources.cgroup import JobCgroup

    cpuacct, memory = tmp_path / "cpuacct", tmp_path / "memory"
    cpuacct.mkdir()
    memory.mkdir()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    watch = BudgetWatch(Budget(max_memory_bytes=1000 * MIB), str(tmp_path / "stop"), None)
    watch.limit_cgroup(JobCgroup(cpuacct, memory, unified=False))
    assert (memory / "memory.limit_in_bytes").read_text() == str(1000 * MIB)
    kills = []
    watch.check(sample(1.0, 500 * MIB), lambda: kills.append(1))
    assert not kills
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    watch.check(sample(1.1, 990 * MIB), lambda: kills.append(1))
    watch.check(sample(1.2, 10 * MIB), lambda: kills.append(1))
    assert kills == [1] and watch.kernel_killed_at == 1.1 and watch.killed_at is None
    result = watch.result(9, None, True, None, processes=[{"pid": 5, "name": "python", "rss_peak_bytes": 1}])
    assert result["stopped"] and not result["graceful"] and "kernel killed the job (python)" in result["reason"]
    assert "the rest of the job was stopped" in result["reason"]
