"""The analysis version, derived: what every registered rule declares (its ids, ``after``, ``version``,
``explains_idle``, ``after_idle_explainers``) hashed with :data:`BASE_VERSION` (raised by hand only for
what is not a rule: phases, summary, timeline). A rule's new version, a new rule or a changed order
changes it, and stored analyses are made again.

Read from the rule modules' source (their ``@rule(...)`` literals), not by importing them: reading a
stored analysis must not load numpy and every rule. ``tests/test_rules.py`` checks it equals what
the imported registry declares."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

BASE_VERSION = 32  # raised when what the analysis makes apart from the rules changes
HERE = Path(__file__).parent


def rule_modules() -> list[str]:
    """The modules :mod:`.findings` imports for their rules (``from tensorgauge.analyse import ...``)."""
    tree = ast.parse((HERE / "findings.py").read_text())
    return [a.name for node in tree.body if isinstance(node, ast.ImportFrom) and node.module == "tensorgauge.analyse"
            for a in node.names]


def declarations_in_source() -> list[list]:
    """Each ``@rule(...)`` of the rule modules, as :meth:`~.rules.Entry.declaration` gives it. Only the
    decorators are parsed (a whole module's tree cost every run 0.2 CPU-s)."""
    found = []
    for name in rule_modules():
        source = (HERE / f"{name}.py").read_text()
        for match in re.finditer(r"^@rule\(", source, re.MULTILINE):
            decorator = ast.parse(_call_at(source, match.start()), mode="eval").body
            assert isinstance(decorator, ast.Call)
            options = {k.arg: ast.literal_eval(k.value) for k in decorator.keywords if k.arg != "category"}
            found.append([[ast.literal_eval(a) for a in decorator.args], list(options.get("after", ())),
                          options.get("version", 1), options.get("explains_idle", False),
                          options.get("after_idle_explainers", False)])
    return found


def _call_at(source: str, start: int) -> str:
    """The call expression that begins at ``source[start] == "@"``, up to its closing parenthesis."""
    depth = 0
    for end in range(start, len(source)):
        depth += {"(": 1, ")": -1}.get(source[end], 0)
        if depth == 0 and source[end] == ")":
            return source[start + 1:end + 1]
    raise ValueError("an unclosed @rule(")


def version_of(declarations: Iterable[list]) -> str:
    text = json.dumps([BASE_VERSION, sorted(declarations)], sort_keys=True)
    return f"{BASE_VERSION}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


@functools.cache
def analysis_version() -> str:
    """``BASE-hash``: changes whenever a rule's declaration (its version included) changes."""
    return version_of(declarations_in_source())
