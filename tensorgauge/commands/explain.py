"""``tensorgauge explain [ID]``: a finding's page (what it means, how it is measured, when it fires, an
example, the fix and how to check it), or the list of finding ids."""

from __future__ import annotations

import argparse
import sys

from tensorgauge.errors import TensorgaugeError


def explain(rule_id: str | None = None) -> int:
    from tensorgauge.analyse.rule_docs import PAGES, ids, page
    from tensorgauge.render.rule_page import markdown

    if rule_id is None:
        width = max(len(i) for i in PAGES)
        for i in ids():
            print(f"{i:<{width}}  {PAGES[i].summary}")
        print("\ntensorgauge explain ID prints a finding's page.")
        return 0
    doc = page(rule_id)
    if doc is None:
        raise TensorgaugeError(f"no finding {rule_id!r}; the ids: {', '.join(ids())}")
    sys.stdout.write(markdown(doc))
    return 0


VERB = "explain"
HELP = "what a finding means, how it is measured, its fix and how to check it"
DESCRIPTION = ("Print the page of the finding ID (as `show` names it: input_bound, stalls, "
               "...): what it means, how it is measured, when it fires, an example, the fix "
               "and how to check it. Without ID, list the ids.")
USES_STORE = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``tensorgauge explain``."""
    p.add_argument("id", nargs="?", metavar="ID", help="a finding id; none: list them")


def main(args: argparse.Namespace) -> int:
    return explain(args.id)
