"""What each finding means, in one place: the page of every registered rule (:mod:`..rules`).

``tensorgauge explain ID`` prints a page, and the documentation site has one per finding, both from
these entries. A page's thresholds are written from the rule modules' own constants, so a changed
threshold changes its page; ``example`` is a finding as ``show`` prints it. Adding a finding: its
:class:`RuleDoc` in the module of its category here (``tests/test_explain.py`` checks every
registered id has a page and every page a rule).
"""

from __future__ import annotations

from tensorgauge.analyse.rule_docs.base import RuleDoc

__all__ = ["PAGES", "RuleDoc", "ids", "page"]


def _pages() -> dict[str, RuleDoc]:
    from tensorgauge.analyse.rule_docs import memory, performance, placement

    return {doc.id: doc for module in (performance, memory, placement) for doc in module.DOCS}


PAGES: dict[str, RuleDoc] = _pages()


def page(rule_id: str) -> RuleDoc | None:
    return PAGES.get(rule_id)


def ids() -> list[str]:
    """Every documented finding id, sorted."""
    return sorted(PAGES)
