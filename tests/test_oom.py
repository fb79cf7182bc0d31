"""A job killed by the kernel's OOM killer is reported as such (needs a writable memory cgroup)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tensorgauge.sources import cgroup
from tensorgauge.store import Store


def limited_cgroup(limit_bytes: int) -> Path | None:
    """A child of our memory cgroup limited to ``limit_bytes``, or None where not permitted."""
    paths = cgroup.cgroup_paths()
    name = f"tensorgauge-test-{uuid.uuid4().hex[:8]}"
    try:
        if paths.unified is not None:
            path = paths.unified / name
            path.mkdir()
            (path / "memory.max").write_text(str(limit_bytes))
            (path / "memory.swap.max").write_text("0") if (path / "memory.swap.max").exists() else None
        elif paths.memory is not None:
            path = paths.memory / name
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        else:
            return None
    except OSError:
        return None
    return path


def test_oom_kill_is_named(store_path, tg_cmd):
    path = limited_cgroup(300 << 20)
    if path is None:
        pytest.skip("no writable memory cgroup here (needs root and cgroup v1 or v2)")
    try:
        hog = "x = []\nwhile True: x.append(bytearray(16 << 20))"
        wrapper = f'echo $$ > {path}/cgroup.procs && exec "$@"'
        result = subprocess.run(["sh", "-c", wrapper, "sh", *tg_cmd, "run", "-q", "--", sys.executable, "-c", hog],
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 137, result.stderr
        record = Store.open(store_path).run("last")
        assert record.signal == 9 and record.oom_killed
        show = subprocess.run([*tg_cmd, "show", "last"], capture_output=True, text=True)
        assert "OOM killer" in show.stdout
        shown = json.loads(subprocess.run([*tg_cmd, "show", "last", "--json"], capture_output=True, text=True).stdout)
        assert shown["end_cause"] == "oom_killer" and shown["post_mortem"]["cause"] == "oom_killer"
    finally:
        os.rmdir(path)
