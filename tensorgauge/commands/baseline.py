"""``tensorgauge baseline save NAME RUN | list | rm NAME``: named baselines, kept as bundles in a
``baselines`` folder beside the store (portable: copy one into a repository and check against the file)."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import CommandStore, baseline_folder, baseline_path
from tensorgauge.errors import TensorgaugeError
from tensorgauge.render.text import plain


def baseline(store: str | None, action: str, name: str | None = None, run: str | None = None) -> int:
    with CommandStore(store) as stores:
        return _baseline(stores, action, name, run)


def _baseline(stores: CommandStore, action: str, name: str | None, run: str | None) -> int:
    from tensorgauge.store.bundle import export_run

    if action == "list":
        folder = baseline_folder(stores)
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        for path in found:
            print(f"{path.stem}\t{path}")
        if not found:
            print("no baselines: tensorgauge baseline save NAME RUN")
        return 0
    if not name:
        raise TensorgaugeError(f"baseline {action} takes a NAME")
    path = baseline_path(stores, name)
    if action == "rm":
        if not path.is_file():
            raise TensorgaugeError(f"no baseline named {plain(name)}")
        path.unlink()
        print(f"removed baseline {plain(name)}")
        return 0
    if not run:
        raise TensorgaugeError("baseline save takes a NAME and a RUN")
    bundle = export_run(stores.get(), run)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    bundle.write(partial)
    partial.replace(path)  # a reader never sees half a baseline
    print(f"baseline {plain(name)}: run {bundle.record.run_id} ({path})")
    return 0


VERB = "baseline"
HELP = "save, list or remove named baselines for 'check'"
DESCRIPTION = ("save NAME RUN keeps the run as a bundle in the baselines folder beside the "
               "store; list shows them; rm NAME removes one.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge baseline``."""
    p.add_argument("action", choices=("save", "list", "rm"))
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("run", nargs="?", metavar="RUN")


def main(args: argparse.Namespace) -> int:
    return baseline(args.store, args.action, args.name, args.run)
