"""What several commands share: consoles, the store, writing outputs, reading a run or a bundle."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from tensorgauge.errors import TensorgaugeError

if TYPE_CHECKING:
    from rich.console import Console

    from tensorgauge.analyse.compare import Side
    from tensorgauge.store import Store


class DroppingStream(io.TextIOBase):
    """The tool's own messages on a text stream (stderr): once a write fails (a closed or broken pipe),
    they are dropped, never an exception, so they cannot end the command or change its exit status.
    The stream's descriptor is then pointed at /dev/null: what is still buffered, and whatever else
    writes there (warnings, the interpreter's flush at exit, which would exit 120), goes nowhere."""

    def __init__(self, stream: Any):
        super().__init__()
        self._stream, self.broken = stream, False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._drop()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the stream's
        return getattr(self._stream, "encoding", None) or "utf-8"

    def _drop(self) -> None:
        self.broken = True
        try:
            fd = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError):  # no descriptor of its own (a test's capture)
            return
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)


def tell(line: str) -> None:
    """One line of the tool's own on stderr, dropped where stderr is closed or broken."""
    if sys.stderr is not None:
        print(line, file=DroppingStream(sys.stderr))


PIPED_WIDTH = 132  # the width of tables when the output is not a terminal


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream is None:  # started with that descriptor closed: print nowhere, never fail for it
        return Console(file=open(os.devnull, "w"), highlight=False)  # noqa: SIM115 (lives as long as the command)
    # Piped output has no width: rich's default of 80 columns would fold the phase table, so tables get
    # PIPED_WIDTH; its lines are never wrapped (a figure stays with its unit, a suggested command whole).
    # On a terminal, lines wrap at its width by words.
    piped = not stream.isatty()
    width = PIPED_WIDTH if piped else None
    if stderr:  # the tool's own messages: a broken stderr must not end the command (rich exits 1 on it)
        return Console(file=cast("IO[str]", DroppingStream(stream)), highlight=False, width=width, soft_wrap=piped)
    return Console(stderr=stderr, highlight=False, width=width, soft_wrap=piped)


def progress_printer() -> Callable[[str], None]:
    """Prints a dim ``tensorgauge: ...`` progress line on stderr."""
    err = console(stderr=True)
    return lambda line: err.print(f"[dim]tensorgauge: {line}[/dim]")


def open_store(location: str | None, create: bool = True, recording: bool = False) -> Store:
    """``recording``: to record a run (a PostgreSQL server that does not answer is waited for, not fatal)."""
    from tensorgauge.render.text import plain
    from tensorgauge.store import Store, default_store_path, is_url

    if recording and is_url(str(location or default_store_path())):  # through a spool: never stops the job
        from tensorgauge.store.location import check_location
        from tensorgauge.store.shipping import open_for_recording

        check_location(str(location or default_store_path()))
        store: Store = open_for_recording(str(location or default_store_path()))
    else:
        store = Store.open(location, create=create)
    waiting = getattr(store, "ship_error", None)
    if waiting:
        tell(f"tensorgauge: note: {plain(waiting)}; the job runs, its data wait in {store.data_dir}/spool "
             "and go to the store when it answers")
    def note(line: str) -> None:
        tell(f"tensorgauge: note: {plain(line)}")

    store.notify = note
    return store


class CommandStore:
    """The store of one command: opened at its first use (a command given only bundle files never opens
    it), once, and closed when the command ends::

        with CommandStore(location) as stores:
            report = RunReport.load(stores.get(), ref)
    """

    def __init__(self, location: str | None, create: bool = False):
        self.location, self.create = location, create
        self._store: Store | None = None

    def get(self) -> Store:
        if self._store is None:
            self._store = open_store(self.location, create=self.create)
        return self._store

    def __enter__(self) -> CommandStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def write_text(text: str, destination: str, store_location: str | None = None) -> None:
    """``text`` to stdout (``-``) or a file, checked as :func:`check_output` checks it (never the store, never
    through a link, never over another user's file); an unwritable file is one line."""
    from tensorgauge.render.text import printable
    from tensorgauge.store.private import write_own_file

    text = printable(text)  # a name or argument that was not UTF-8 must not stop the write half-way
    if destination == "-":
        sys.stdout.write(text + "\n")
        return
    check_output(destination, store_location)
    try:
        write_own_file(Path(destination).expanduser(), (text + "\n").encode("utf-8"), "cannot write")
    except OSError as exc:
        raise TensorgaugeError(f"cannot write {destination}: {exc.strerror}") from None


def check_output(destination: str, store_location: str | None = None) -> None:
    """Before any work: ``destination`` can be written, and is not the store (or its journal)."""
    if destination == "-":
        return
    from tensorgauge.store import default_store_path, is_url
    from tensorgauge.store.private import writable_target

    path = Path(destination).expanduser()
    store = str(store_location or default_store_path())
    if not is_url(store):
        for suffix in ("", "-wal", "-shm", "-journal"):
            own = store + suffix
            if os.path.realpath(path) == os.path.realpath(own) or _same_file(path, own):
                raise TensorgaugeError(f"{destination} is the run store itself: write somewhere else")
    writable_target(path, "cannot write")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TensorgaugeError(f"cannot write {destination}: no folder {folder}")
    if not os.access(path if path.exists() else folder, os.W_OK):
        raise TensorgaugeError(f"cannot write {destination}: permission denied")


def _same_file(a: Path | str, b: Path | str) -> bool:
    """The same file by device and inode (a hard link is the file under another name)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def write_json(document: dict[str, Any], destination: str, store_location: str | None = None) -> None:
    write_text(json.dumps(document, indent=2, default=str), destination, store_location)


def analyse_bundle(bundle, where: str):
    """The bundle's run analysed (from its columns, as a stored run is); a bundle checked field by field
    that still contradicts itself is one :class:`~tensorgauge.store.bundle.BundleError`."""
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store.bundle import BundleError

    try:
        return RunReport.build(bundle.record, bundle.series, bundle.events)
    except Exception as exc:
        raise BundleError(f"{where}: the bundle's run cannot be analysed, its data is inconsistent "
                          f"({type(exc).__name__}: {str(exc)[:120]})") from None


def load_side(stores: CommandStore, ref: str) -> Side:
    """A run (id, prefix, name) from the store, or a bundle file, analysed for a comparison."""
    from tensorgauge.analyse.compare import Side
    from tensorgauge.analyse.run_report import RunReport
    from tensorgauge.store.bundle import read

    if Path(ref).is_file():
        return Side(Path(ref).name, analyse_bundle(read(ref), ref))
    report = RunReport.load(stores.get(), ref)
    return Side(report.record.name or report.record.run_id, report)


WINDOW_SECONDS = 120.0  # --from without --to: two minutes
# What the samples of a --from/--to window may decode to (show makes each a record): a day at 10 Hz
# on 2 CPUs is 124 MB, an hour on 64 CPUs 23 MB.
WINDOW_MAX_BYTES = 128 << 20


def window(report, start: float | None, end: float | None) -> tuple[float, float]:
    """The (from, to) seconds a ``--from``/``--to`` pair names in ``report``'s run (checked)."""
    first = start if start is not None else 0.0
    wall = report.record.wall_seconds or report.timeline.get("wall_seconds") or 0.0
    last = end if end is not None else (first + WINDOW_SECONDS if start is not None else wall)
    if last <= first:
        raise TensorgaugeError(f"--to ({last:g} s) must come after --from ({first:g} s)")
    return first, last


# -- named baselines (tensorgauge baseline; check --against NAME) --------------------------

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # a baseline name


def baseline_folder(stores: CommandStore) -> Path:
    return stores.get().data_dir / "baselines"


def baseline_path(stores: CommandStore, name: str) -> Path:
    from tensorgauge.render.text import plain

    if not NAME.fullmatch(name):
        raise TensorgaugeError(f"baseline name {plain(name)!r}: use letters, digits, '.', '_' and '-' "
                               "(at most 100, not starting with a dot)")
    return baseline_folder(stores) / f"{name}.json"


def resolve_baseline(stores: CommandStore, ref: str) -> str:
    """A named baseline's bundle file, else ``ref`` as it is (a bundle file or a run)."""
    if NAME.fullmatch(ref) and not Path(ref).is_file():
        try:
            path = baseline_path(stores, ref)
        except TensorgaugeError:
            return ref
        if path.is_file():
            return str(path)
    return ref


def grace_seconds(text: str) -> float:
    """An argparse type: a grace period in seconds, from 0 to a day."""
    import argparse

    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= 24 * 3600:  # false for NaN too
        raise argparse.ArgumentTypeError(f"the grace period must be between 0 s and a day, got {text}")
    return seconds


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def offset(text: str) -> float:
    """An argparse type: a time from the run's start (3h10m, 90s, 12.5)."""
    import argparse

    from tensorgauge.units import parse_offset_seconds

    try:
        return parse_offset_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def window_arguments(p: Any, what: str) -> None:
    """``--from``/``--to``: a stretch of a run."""
    p.add_argument("--from", dest="start", type=offset, metavar="TIME", help=what)
    p.add_argument("--to", dest="end", type=offset, metavar="TIME",
                   help="the window's end (default: 2 minutes after --from, or the run's end)")
