"""The call sites a run recorded (``code_sites`` events, :mod:`tensorgauge.hook.call_sites`), read into
what the planner asks of them: the pipeline each fit or loop read, where compile was called for the fit's
model, the eager gradients, predict calls, DataLoaders, each file's hash as the job read it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorgauge.hook.protocol import CodeSites, Kind
from tensorgauge.model import Event


@dataclass(frozen=True)
class Site:
    """A line of the user's code."""

    path: str
    line: int

    @classmethod
    def parse(cls, text: str | None) -> Site | None:
        path, _, line = (text or "").rpartition(":")
        return cls(path, int(line)) if path and line.isdigit() else None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Pipeline:
    consumer: str  # "fit" or "loop"
    site: Site | None  # where fit was called (a loop: its first step's user frame)
    stages: list[dict]  # source first, as the hook sent them
    model: int | None = None


@dataclass
class RecordedSites:
    pipelines: list[Pipeline] = field(default_factory=list)
    calls: dict[str, list[tuple[Site, CodeSites]]] = field(default_factory=dict)  # by call: compile, predict, ...
    files: dict[str, str | None] = field(default_factory=dict)  # path -> SHA-256 as the job read it
    losses: list[list[float]] = field(default_factory=list)  # each fit's per-epoch losses
    recorded: bool = False  # the run had the hook's call sites (a run of an older version has none)

    def sites(self, call: str) -> list[Site]:
        return [site for site, _ in self.calls.get(call, [])]

    def compile_for(self, model: int | None) -> list[tuple[Site, CodeSites]]:
        """Where the fit's model was compiled: the compile calls of that model, else every one."""
        compiles = self.calls.get("compile", [])
        mine = [c for c in compiles if model is not None and c[1].get("model") == model]
        return mine or compiles

    def fit_model(self) -> int | None:
        for pipeline in self.pipelines:
            if pipeline.consumer == "fit" and pipeline.model is not None:
                return pipeline.model
        fits = self.calls.get("fit", [])
        return fits[0][1].get("model") if fits else None


def read_sites(events: list[Event]) -> RecordedSites:
    out = RecordedSites()
    for event in events:
        if event.kind != Kind.CODE_SITES:
            continue
        data = event.read(CodeSites)
        out.recorded = True
        out.files.update({k: v for k, v in (data.get("files") or {}).items() if k not in out.files})
        call = data.get("call") or ""
        if call == "fit_losses":
            out.losses.append([float(v) for v in data.get("losses") or []])
            continue
        site = Site.parse(data.get("site"))
        if call in ("fit", "loop") and data.get("stages") is not None:
            out.pipelines.append(Pipeline(call, site, list(data.get("stages") or []), data.get("model")))
        elif site is not None:
            out.calls.setdefault(call, []).append((site, data))
    return out
