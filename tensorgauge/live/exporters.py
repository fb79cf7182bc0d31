"""The exporter registry: each output of a live run is declared once, as an :class:`ExporterSpec`
(its name, its ``run`` flag, the factory that makes it from the flag's value, and the line said when
it starts). The built-in ones are listed in :data:`BUILTIN`; a package of anyone's adds one without
a change here by naming its spec under the entry-point group ``tensorgauge.exporters``::

    # the other package's pyproject.toml
    [project.entry-points."tensorgauge.exporters"]
    csv = "tg_csv:SPEC"          # SPEC = ExporterSpec("csv", "--csv", ..., factory=CsvExporter)

``tensorgauge run`` then takes ``--csv PATH`` and the exporter sees the run as the built-in ones do
(:class:`~tensorgauge.monitoring.monitor.Exporter`)."""

from __future__ import annotations

import argparse
import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorgauge.monitoring.monitor import Exporter

ENTRY_POINT_GROUP = "tensorgauge.exporters"


def _no_message(exporter: Any) -> str | None:
    return None


@dataclass(frozen=True)
class ExporterSpec:
    """One exporter, declared once. ``factory(value)`` makes it from its flag's value (a
    :class:`~tensorgauge.errors.TensorgaugeError` for a bad value: one line, exit 2); ``bare``: the
    value of the flag given without one (None: a value is required); ``start_message(exporter)``: the
    line said once the run started (where it can be seen), or None."""

    name: str
    flag: str
    help: str
    factory: Callable[[str], Exporter]
    metavar: str = "VALUE"
    bare: str | None = None
    start_message: Callable[[Any], str | None] = _no_message

    @property
    def dest(self) -> str:
        return f"export_{self.name.replace('-', '_')}"

    def add_argument(self, parser: argparse.ArgumentParser) -> None:
        if self.bare is None:
            parser.add_argument(self.flag, dest=self.dest, metavar=self.metavar, help=self.help)
        else:
            parser.add_argument(self.flag, dest=self.dest, metavar=self.metavar, help=self.help, nargs="?",
                                const=self.bare)


def _tensorboard(logdir: str) -> Exporter:
    from tensorgauge.live.tensorboard import TensorBoardWriter

    return TensorBoardWriter(logdir)


def _prometheus(address: str) -> Exporter:
    from tensorgauge.live.prometheus import PrometheusExporter

    return PrometheusExporter(address)


def _otlp(url: str) -> Exporter:
    from tensorgauge.live.otlp import OtlpExporter

    return OtlpExporter(url or None)


BUILTIN: tuple[ExporterSpec, ...] = (
    ExporterSpec("tensorboard", "--tensorboard", "write system metrics as TensorBoard scalars into "
                 "LOGDIR/tensorgauge, on the training step and epoch axes", _tensorboard, metavar="LOGDIR"),
    ExporterSpec("prometheus", "--prometheus", "serve live metrics for Prometheus on HOST:PORT (default host "
                 "127.0.0.1), e.g. 9464", _prometheus, metavar="[HOST:]PORT",
                 start_message=lambda e: f"Prometheus metrics on http://{e.host}:{e.port}/metrics"),
    ExporterSpec("otlp", "--otlp", "send live metrics and, at the end, the run's phases as one trace to an "
                 "OpenTelemetry Collector over OTLP/HTTP (default $OTEL_EXPORTER_OTLP_ENDPOINT or "
                 "http://127.0.0.1:4318)", _otlp, metavar="URL", bare="",
                 start_message=lambda e: f"OpenTelemetry metrics and trace to {e.shown_url} (OTLP/HTTP)"),
)


def _from_entry_points() -> list[ExporterSpec]:
    """The specs other packages declare under :data:`ENTRY_POINT_GROUP`; one that fails to load, or is
    no spec, is skipped with a warning (another package's fault must not break the command line)."""
    from importlib.metadata import entry_points

    found = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = entry.load()
        except Exception as exc:  # their import, their bug
            warnings.warn(f"tensorgauge: exporter {entry.name!r} ({entry.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        if not isinstance(spec, ExporterSpec):
            warnings.warn(f"tensorgauge: exporter {entry.name!r} ({entry.value}) is not an ExporterSpec",
                          RuntimeWarning, stacklevel=2)
            continue
        found.append(spec)
    return found


@functools.cache
def registered() -> tuple[ExporterSpec, ...]:
    """The built-in exporters, then those of other packages (a name or flag already taken is skipped)."""
    specs = list(BUILTIN)
    for spec in _from_entry_points():
        if any(s.name == spec.name or s.flag == spec.flag for s in specs):
            warnings.warn(f"tensorgauge: exporter {spec.name!r} ({spec.flag}) is already declared; skipped",
                          RuntimeWarning, stacklevel=2)
            continue
        specs.append(spec)
    return tuple(specs)


def chosen(args: argparse.Namespace, specs: tuple[ExporterSpec, ...]) -> dict[str, str]:
    """The exporters asked for on the command line: name -> the flag's value."""
    return {s.name: value for s in specs if (value := getattr(args, s.dest, None)) is not None}
