"""``tensorgauge check``'s outputs: plain text for a terminal, Markdown for a CI job summary, JUnit XML
for any CI's test report."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from tensorgauge.analyse.check import CheckResult
from tensorgauge.render.text import plain

MARKS = {"pass": "pass", "within noise": "within noise", "fail": "FAIL"}


def _verdict_line(result: CheckResult) -> str:
    if result.passed:
        return f"PASS: {result.current} is within its limits against {result.baseline}"
    failed = ", ".join(c.describe() for c in result.failed) or "new findings"
    return f"FAIL: {result.current} against {result.baseline}: {failed}"


def text(result: CheckResult) -> str:
    lines = [plain(_verdict_line(result)), ""]
    for c in result.checks:
        lines.append(f"  {MARKS[c.verdict]:<12} {plain(c.describe())}   limit {c.limit - 1:+.0%}, noise {c.noise - 1:+.0%}")
    if result.note:
        lines += ["", f"Note: {plain(result.note)}"]
    if result.new_findings:
        lines += ["", "New findings:"] + [f"  {f['severity']:<8} {plain(f['title'])} ({f['id']})"
                                          for f in result.new_findings]
    if result.causes:
        lines += ["", "What changed (most direct first):"] + [f"  {i}. {plain(c)}"
                                                              for i, c in enumerate(result.causes, 1)]
    elif not result.passed:
        lines += ["", "What changed: nothing tensorgauge records differs between the two jobs"]
    return "\n".join(lines) + "\n"


def _cell(value: str) -> str:
    """``value`` as Markdown text: HTML (a run's name, a command) shown, never rendered."""
    return plain(value).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def markdown(result: CheckResult) -> str:
    mark = "✅" if result.passed else "❌"
    lines = [f"### {mark} tensorgauge check: {_cell(result.current)} against {_cell(result.baseline)}", "",
             f"**{'Within its limits' if result.passed else 'Failed'}**", "",
             "| check | baseline | now | change | limit | noise | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in result.checks:
        a, b = c.describe().split(": ", 1)[1].split(" -> ")
        verdict = {"fail": "**fail**", "within noise": "within noise", "pass": "pass"}[c.verdict]
        lines.append(f"| {_cell(c.name)} | {_cell(a)} | {_cell(b.rsplit(' (', 1)[0])} | {(c.ratio - 1):+.0%} | "
                     f"{c.limit - 1:+.0%} | {c.noise - 1:+.0%} | {verdict} |")
    if result.note:
        lines += ["", f"> {_cell(result.note)}"]
    if result.new_findings:
        lines += ["", "**New findings**", ""] + [f"- {_cell(f['title'])} (`{f['id']}`, {f['severity']})"
                                                 for f in result.new_findings]
    if result.causes:
        lines += ["", "**What changed** (most direct first)", ""] + [f"{i}. {_cell(c)}"
                                                                    for i, c in enumerate(result.causes, 1)]
    return "\n".join(lines) + "\n"


def junit(result: CheckResult) -> str:
    """One test suite, one test case per check (and one for new findings when they fail the check)."""
    cases = []
    causes = "\n".join(f"{i}. {c}" for i, c in enumerate(result.causes, 1))
    for c in result.checks:
        body = ""
        if c.verdict == "fail":
            body = (f"<failure message={quoteattr(plain(c.describe()))} type=\"regression\">"
                    f"{escape(plain(c.describe()))}\n\nWhat changed:\n{escape(plain(causes))}</failure>")
        elif c.verdict == "within noise":
            body = f"<system-out>{escape(plain(c.describe()))}: past the limit, within noise</system-out>"
        cases.append(f"  <testcase classname=\"tensorgauge.check\" name={quoteattr(plain(c.name))}>{body}</testcase>")
    if result.limits.no_new_findings:
        body = ""
        if result.new_findings:
            titles = "\n".join(f"{f['id']}: {f['title']}" for f in result.new_findings)
            body = f"<failure message=\"new findings\" type=\"new_findings\">{escape(plain(titles))}</failure>"
        cases.append(f"  <testcase classname=\"tensorgauge.check\" name=\"no new findings\">{body}</testcase>")
    failures = sum(1 for case in cases if "<failure" in case)
    return (f"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<testsuites>\n<testsuite name=\"tensorgauge check\" "
            f"tests=\"{len(cases)}\" failures=\"{failures}\" errors=\"0\">\n" + "\n".join(cases)
            + "\n</testsuite>\n</testsuites>\n")


FORMATS = {"text": text, "markdown": markdown, "junit": junit}
