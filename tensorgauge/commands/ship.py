"""``tensorgauge ship``: send the runs waiting on this machine for a PostgreSQL store (left in their spools
when the store did not take them before their monitor ended) to it now, each in order and exactly once."""

from __future__ import annotations

import argparse

from tensorgauge.commands._shared import open_store
from tensorgauge.errors import TensorgaugeError


def ship(location: str | None) -> int:
    """0 when nothing waits any longer; 1 when some spools still wait (held by a run being recorded, or
    the store stopped answering part-way)."""
    from tensorgauge.render.text import plain
    from tensorgauge.store import default_store_path, is_url
    from tensorgauge.store.shipping import ship_spools

    target = str(location or default_store_path())
    if not is_url(target):
        print(f"nothing to ship: runs wait on this machine only for a PostgreSQL store, and {plain(target)} "
              "is a file (give the store's URL with --store)")
        return 0
    done: list[int] = []

    def shipped(run_id: str, samples: int) -> None:
        done.append(samples)
        print(f"run {plain(run_id)}: shipped ({samples} samples)", flush=True)

    with open_store(target) as store:
        try:
            left = ship_spools(store, shipped=shipped)
        except TensorgaugeError as exc:
            raise TensorgaugeError(f"{exc} (what was not shipped still waits on this machine)") from None
        where = plain(store.location)
    if left:
        print(f"{left} run(s) still wait for {where}: being recorded (their monitor ships them) or shipped by "
              "another process; 'tensorgauge runs' names them")
        return 1
    print(f"shipped {len(done)} run(s) to {where}; nothing waits on this machine" if done
          else f"nothing waits on this machine for {where}")
    return 0


VERB = "ship"
HELP = "send the runs waiting on this machine for a PostgreSQL store to it now"
DESCRIPTION = ("Runs recorded while a PostgreSQL store did not answer wait in local spools; the next "
               "'tensorgauge run' into the store ships them as it ends. This ships them now.")
USES_STORE = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``tensorgauge ship`` has no flags of its own: ``--store`` names the store."""


def main(args: argparse.Namespace) -> int:
    return ship(args.store)
