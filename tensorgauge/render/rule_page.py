"""A finding's page as Markdown: what ``tensorgauge explain ID`` prints and the documentation site shows
(:mod:`tensorgauge.analyse.rule_docs` holds the words)."""

from __future__ import annotations

import io

from rich.console import Console

from tensorgauge.analyse.rule_docs import RuleDoc
from tensorgauge.model import Finding
from tensorgauge.render.terminal import render_finding

EXAMPLE_WIDTH = 100  # columns of the example's text, as a terminal of that width shows it


def show_text(finding: Finding, width: int = EXAMPLE_WIDTH) -> str:
    """The lines ``tensorgauge show`` prints for ``finding``, without colour."""
    out = io.StringIO()
    render_finding(Console(file=out, width=width, color_system=None, highlight=False, force_terminal=False), finding)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())


def markdown(doc: RuleDoc) -> str:
    """The page: id and summary, what it means, how it is measured, thresholds, an example, the fix, the check."""
    thresholds = "\n".join(f"- {line}" for line in doc.thresholds)
    return (f"# `{doc.id}`\n\n"
            f"{doc.summary}\n\n"
            f"*Category: {doc.category}.*\n\n"
            f"## What it means\n\n{doc.meaning}\n\n"
            f"## How it is measured\n\n{doc.measured}\n\n"
            f"## When it fires\n\n{thresholds}\n\n"
            f"## What `show` prints\n\n```text\nFindings\n{show_text(doc.example)}\n```\n\n"
            f"## The fix\n\n{doc.fix}\n\n"
            f"## How to check it\n\n{doc.check}\n")


def index_markdown(docs: list[RuleDoc]) -> str:
    """The list of findings, by category, each id with its one-line summary (a link on the site)."""
    lines = ["# Findings", "",
             "`tensorgauge show` lists findings with an id, a severity, the evidence, a fix and the expected gain; "
             "`tensorgauge explain ID` prints a finding's page in the terminal. The ids are stable.", ""]
    for category in dict.fromkeys(d.category for d in docs):
        lines += [f"## {category.capitalize()}", "", "| id | what it says |", "| --- | --- |"]
        lines += [f"| [`{d.id}`]({d.id}.md) | {d.summary} |" for d in docs if d.category == category]
        lines.append("")
    return "\n".join(lines)
