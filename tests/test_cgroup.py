from tensorgauge.sources import cgroup


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_v1_limits_and_oom_count(tmp_path):
    write(tmp_path / "proc/self/cgroup", "4:memory:/job\n1:cpu:/job\n0::/\n")
    write(tmp_path / "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "2147483648\n")
    write(tmp_path / "sys/fs/cgroup/memory/job/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    write(tmp_path / "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us", "150000\n")
    write(tmp_path / "sys/fs/cgroup/cpu/job/cpu.cfs_period_us", "100000\n")
    paths = cgroup.cgroup_paths(root=str(tmp_path))
    assert cgroup.memory_limit_bytes(paths) == 2 << 30
    assert cgroup.oom_kill_count(paths) == 3
    assert cgroup.cpu_quota_cores(paths) == 1.5


def test_v1_unlimited(tmp_path):
    write(tmp_path / "proc/self/cgroup", "4:memory:/\n1:cpu:/\n")
    write(tmp_path / "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    write(tmp_path / "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n")
    paths = cgroup.cgroup_paths(root=str(tmp_path))
    assert cgroup.memory_limit_bytes(paths) is None
    assert cgroup.cpu_quota_cores(paths) is None


def test_v2(tmp_path):
    write(tmp_path / "proc/self/cgroup", "0::/user/job\n")
    base = tmp_path / "sys/fs/cgroup/user/job"
    write(base / "cgroup.controllers", "cpu memory\n")
    write(base / "cpu.max", "50000 100000\n")
    write(base / "memory.max", "1073741824\n")
    write(base / "memory.events", "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n")
    paths = cgroup.cgroup_paths(root=str(tmp_path))
    assert cgroup.cpu_quota_cores(paths) == 0.5
    assert cgroup.memory_limit_bytes(paths) == 1 << 30
    assert cgroup.oom_kill_count(paths) == 1
    write(base / "cpu.max", "max 100000\n")
    write(base / "memory.max", "max\n")
    assert cgroup.cpu_quota_cores(paths) is None and cgroup.memory_limit_bytes(paths) is None


def test_missing_proc_gives_empty_paths(tmp_path):
    paths = cgroup.cgroup_paths(root=str(tmp_path))
    assert cgroup.memory_limit_bytes(paths) is None and cgroup.oom_kill_count(paths) is None


def test_a_monitor_sweeps_only_old_empty_cgroups_never_one_just_made_for_another_job(tmp_path):
    """Two runs starting together: the second monitor's sweep removed the first's cgroup, made a moment
    before its job joined (seen with two test processes; a multi-worker job started on one host does the
    same). An empty one an hour old is a killed monitor's, and goes."""
    import os
    import time

    from tensorgauge.sources import cgroup as cg

    fresh, old = tmp_path / "tensorgauge-run-b", tmp_path / "tensorgauge-run-a"
    fresh.mkdir()
    old.mkdir()
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    cg._sweep_empty(cg.CgroupPaths(unified=tmp_path), "tensorgauge-")
    assert fresh.exists() and not old.exists()


def test_a_process_outside_one_v1_hierarchy_is_no_member_of_the_jobs_cgroup(tmp_path):
    """Members were read from the cpuacct folder alone: a job that wrote its pid into the memory
    hierarchy's parent still counted as inside, its memory charged elsewhere and capped by nothing."""
    folders = {name: tmp_path / name / "tensorgauge-x" for name in ("cpuacct", "memory", "cpu")}
    for name, members in (("cpuacct", "10\n11\n12\n"), ("memory", "10\n12\n"), ("cpu", "10\n12\n11\n")):
        write(folders[name] / "cgroup.procs", members)
    group = cgroup.JobCgroup(folders["cpuacct"], folders["memory"], unified=False, quota_dir=folders["cpu"])
    assert group.members() == [10, 12] and group.memory_members() == {10, 12}
    assert group.outside(11) == ["memory"] and not group.holds(11) and group.holds(10)
    assert sorted(group.pids()) == [10, 11, 12]  # stopping the job reaches it all the same
    write(folders["cpu"] / "cgroup.procs", "10\n11\n")
    assert group.members() == [10] and group.outside(12) == ["cpu"]


def test_cpu_and_cpuacct_mounted_together_are_one_hierarchy(tmp_path):
    shared, memory = tmp_path / "cpu,cpuacct" / "x", tmp_path / "memory" / "x"
    write(shared / "cgroup.procs", "7\n")
    write(memory / "cgroup.procs", "")
    group = cgroup.JobCgroup(shared, memory, unified=False, quota_dir=shared)
    assert group.hierarchies() == {shared: "cpuacct,cpu", memory: "memory"}
    assert group.members() == [] and group.outside(7) == ["memory"]
