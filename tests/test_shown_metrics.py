"""Every sampled metric declared ``shown`` in model.py reaches every output without a change there:
the run's summary (and so `show`'s and the report's sampled line, and the JSON), Prometheus, TensorBoard
and the live view. A metric added to model.py is checked here by being declared."""

import io
import socket

import pytest
from rich.console import Console

from tensorgauge.analyse.summary import summarise
from tensorgauge.live.tensorboard import metrics as tensorboard_scalars
from tensorgauge.live.view import ON_THEIR_OWN_ROWS, LiveView
from tensorgauge.model import RunRecord, Sample, shown_metrics
from tensorgauge.render.terminal import ON_THE_CPU_AND_MEMORY_LINES
from tensorgauge.render.text import sampled_figures

METRICS = shown_metrics()


def sample(t: float) -> Sample:
    """Every shown metric read, with a value of its own (t + its position)."""
    s = Sample(t=t, cpu_seconds=t, cores_busy=None, rss_bytes=0, threads=0, processes=0)
    for i, metric in enumerate(METRICS):
        setattr(s, metric.name, (1 << 20) * (i + 1) + int(t) if metric.unit == "bytes" else i + 1 + int(t))
    return s


def record() -> RunRecord:
    return RunRecord(run_id="r", command=["x"], started_at="2026", wall_seconds=2.0,
                     env={"host": {"cores_allowed": 2.0}})


def test_the_declared_metrics_are_the_ones_shown():
    names = [m.name for m in METRICS]
    assert {"cores_busy", "rss_bytes", "mem_used_bytes", "swap_used_bytes"} <= set(names)
    assert len(set(m.exported for m in METRICS)) == len(METRICS)  # one exported name each


def test_the_summary_has_each_metrics_mean_and_peak_and_show_and_the_report_say_them():
    summary = summarise(record(), [sample(0.0), sample(1.0)])
    low, high = sample(0.0), sample(1.0)
    for metric in METRICS:
        assert summary.metrics[metric.name] == {"mean": pytest.approx((getattr(low, metric.name)
                                                                         + getattr(high, metric.name)) / 2),
                                                "peak": getattr(high, metric.name)}
    line = sampled_figures(summary, leave_out=ON_THE_CPU_AND_MEMORY_LINES)
    for metric in METRICS:
        assert (f"{metric.label} mean" in line) == (metric.name not in ON_THE_CPU_AND_MEMORY_LINES), (metric, line)
    assert all(f"{m.label} mean" in sampled_figures(summary) for m in METRICS)  # the report's header: all of them
    assert sampled_figures(summarise(record(), [])) == ""  # nothing read, nothing said


def test_prometheus_serves_a_gauge_for_each():
    prometheus_client = pytest.importorskip("prometheus_client")
    from tensorgauge.live.prometheus import PrometheusExporter

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = PrometheusExporter(f"127.0.0.1:{port}")
    try:
        exporter.start(record())
        exporter.observe(sample(1.0), [])
        text = prometheus_client.generate_latest(exporter.registry).decode()
    finally:
        exporter.close()
    for metric in METRICS:
        line = next(x for x in text.splitlines() if x.startswith(f"tensorgauge_{metric.exported}{{"))
        assert float(line.rsplit(" ", 1)[1]) == getattr(sample(1.0), metric.name)


def test_tensorboard_writes_a_scalar_for_each():
    scalars = tensorboard_scalars(sample(1.0))
    for metric in METRICS:
        value = getattr(sample(1.0), metric.name)
        if metric.unit == "bytes":
            assert scalars[metric.exported.removesuffix("_bytes") + "_gib"] == value / 2**30
        else:
            assert scalars[metric.exported] == value


def test_the_live_view_shows_each():
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=200))
    view.start(record())
    view.observe(sample(1.0), [])
    view.close()
    text = out.getvalue()
    for metric in METRICS:
        if metric.name not in ON_THEIR_OWN_ROWS:
            assert metric.label in text, metric


def test_show_from_to_has_a_column_for_each():
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.render.terminal import render_window

    out = io.StringIO()
    samples = [sample(0.0), sample(1.0)]
    report = RunReport.build(record(), samples, [])
    render_window(Console(file=out, width=400), report, samples, 0.0, 1.0)
    header = out.getvalue().splitlines()[1]
    for metric in METRICS:
        assert metric.label in header, metric
