"""``tensorgauge report RUN [RUN] -o FILE.html``: a self-contained HTML report (or a comparison)."""

from __future__ import annotations

import gc

from tensorgauge.commands._shared import check_output, load_side, write_text
from tensorgauge.errors import TensorgaugeError
from tensorgauge.render.text import plain


def report(store: str | None, refs: list[str], output: str) -> int:
    from tensorgauge.render.html import comparison_page, run_page

    gc.disable()  # a one-hour run loads ~1M small objects that all live to the end: no cycles to find
    if len(refs) > 2:
        raise TensorgaugeError("report takes one run, or two to compare")
    check_output(output, store)
    sides = [load_side(store, ref) for ref in refs]
    if len(sides) == 1:
        page = run_page(sides[0].report)
    else:
        from tensorgauge.analyse.compare import compare

        page = comparison_page(sides[0], sides[1], compare(*sides))
    write_text(page, output)
    if output != "-":
        print(f"report: {plain(output)}")
    return 0
