"""The exporter registry: one declaration per exporter, others' exporters found through the
``tensorgauge.exporters`` entry point, ``monitor(exporters=)`` and the in-memory exporter."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tensorgauge
from tensorgauge.cli import build_parser
from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.exporters import BUILTIN, ENTRY_POINT_GROUP, chosen, registered
from tensorgauge.sources import TreeReading
from tensorgauge.testing import FakeClock, FakeProcessTree, FakeSources, InMemoryExporter

REPO = Path(__file__).resolve().parent.parent

PLUGIN = '''
"""A third party's exporter: each sample's RSS as a line of its file."""
import json
from tensorgauge.errors import TensorgaugeError
from tensorgauge.live.exporters import ExporterSpec


class LinesExporter:
    def __init__(self, path):
        self.path, self.lines = path, []

    def start(self, record):
        self.lines.append({"started": record.run_id})

    def observe(self, sample, events):
        if sample is not None:
            self.lines.append({"t": sample.t, "rss_bytes": sample.rss_bytes})
            with open(self.path + ".seen", "a") as seen:  # for the job, which waits for two
                seen.write("sample\\n")

    def conclude(self, report):
        self.lines.append({"phases": len(report["phases"]), "exit_code": report["exit_code"]})

    def close(self, timeout=None):
        with open(self.path, "w") as out:
            json.dump({"lines": self.lines, "timeout": timeout}, out)


SPEC = ExporterSpec("lines", "--lines", "each sample's RSS as a line of PATH", LinesExporter, metavar="PATH",
                    start_message=lambda e: f"lines to {e.path}")
'''


def _install_plugin(folder: Path) -> None:
    """A package installed the way pip leaves one: its module and a dist-info naming its entry point."""
    (folder / "tg_lines_exporter.py").write_text(PLUGIN)
    info = folder / "tg_lines_exporter-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-lines-exporter\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nlines = tg_lines_exporter:SPEC\n")


def test_an_exporter_of_another_package_runs_through_its_entry_point(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_plugin(site)
    out = tmp_path / "lines.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    # The job runs until the exporter has seen two samples (a loaded machine can take longer than a short
    # job to start sampling it), then exits 3; at most a minute.
    job = (f"import pathlib, time\nseen, end = pathlib.Path({str(out) + '.seen'!r}), time.time() + 60\n"
           "while time.time() < end and len(seen.read_text().splitlines() if seen.exists() else []) < 2:\n"
           "    time.sleep(0.05)\nraise SystemExit(3)\n")
    done = subprocess.run([sys.executable, "-m", "tensorgauge", "run", "--store", str(tmp_path / "runs.db"),
                           "--no-hook", "--lines", str(out), "--", sys.executable, "-c", job],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert f"tensorgauge: lines to {out}" in done.stderr
    written = json.loads(out.read_text())
    lines = written["lines"]
    assert "started" in lines[0]
    assert sum("rss_bytes" in line for line in lines) >= 2  # samples while the job ran
    assert lines[-1] == {"phases": 0, "exit_code": 3}  # the analysed run, then closed within a bound
    assert written["timeout"] > 0


def test_without_the_package_the_flag_is_unknown(tmp_path):
    with pytest.raises(TensorgaugeError, match="unrecognized arguments: --lines"):
        build_parser().parse_args(["run", "--lines", "x", "--", "true"])


def test_builtin_exporters_are_declared_once_with_their_flags():
    names = [s.name for s in registered()]
    assert names[:3] == ["tensorboard", "prometheus", "otlp"] and len(set(names)) == len(names)
    args = build_parser().parse_args(["run", "--prometheus", "9464", "--otlp", "--", "true"])
    assert chosen(args, BUILTIN) == {"prometheus": "9464", "otlp": ""}  # a bare --otlp: the default URL


def test_monitor_shows_the_run_to_its_exporters(tmp_path):
    clock = FakeClock()
    tree = FakeProcessTree(readings=[TreeReading(cpu_seconds=0.0, rss_bytes=4096, threads=1, processes=1)] * 1000)
    exporter = InMemoryExporter()
    with tensorgauge.monitor(name="mem", store=str(tmp_path / "runs.db"), interval_seconds=0.01,
                             sources=FakeSources(clock=clock, tree=tree), exporters=[exporter]) as run:
        deadline = time.monotonic() + 10
        while len(exporter.samples) < 3 and time.monotonic() < deadline:
            clock.advance(0.05)
            time.sleep(0.02)
    assert exporter.record.run_id == run.run_id
    assert len(exporter.samples) >= 3
    assert exporter.closed_with is not None and exporter.closed_with[0] > 0
