"""``tensorgauge check``'s outputs: plain text for a terminal, Markdown for a CI job summary, JUnit XML
for any CI's test report."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from tensorgauge.analyse.check import CheckResult
from tensorgauge.render.text import plain

MARKS = {"pass": "pass", "within noise": "within noise", "fail": "FAIL"}


def _failures(result: CheckResult) -> list[str]:
    """What fails the run, the run's own end first."""
    found = [result.not_completed] if result.not_completed else []
    found += [c.describe() for c in result.failed]
    if result.limits.no_new_findings and result.new_findings:
        found.append("new findings")
    return found


def _verdict_line(result: CheckResult) -> str:
    if result.passed:
        return f"PASS: {result.current} is within its limits against {result.baseline}"
    return f"FAIL: {result.current} against {result.baseline}: {'; '.join(_failures(result))}"


CUT_NOTE = "its figures cover only what ran before it ended, so they are not those of the whole job"


def text(result: CheckResult) -> str:
    lines = [plain(_verdict_line(result)), ""]
    for c in result.checks:
        lines.append(f"  {MARKS[c.verdict]:<12} {plain(c.describe())}   limit {c.limit - 1:+.0%}, noise {c.noise - 1:+.0%}")
    lines += [f"  {'not compared':<12} {plain(why)}" for why in result.not_compared]
    if result.not_completed:
        lines += ["", f"The run {plain(result.not_completed)}: {CUT_NOTE}."]
    if result.note:
        lines += ["", f"Note: {plain(result.note)}"]
    if result.new_findings:
        lines += ["", "New findings:"] + [f"  {f['severity']:<8} {plain(f['title'])} ({f['id']})"
                                          for f in result.new_findings]
    if result.causes:
        lines += ["", "What changed (most direct first):"] + [f"  {i}. {plain(c)}"
                                                              for i, c in enumerate(result.causes, 1)]
    elif result.failed:
        lines += ["", "What changed: nothing tensorgauge records differs between the two jobs"]
    return "\n".join(lines) + "\n"


def _cell(value: str) -> str:
    """``value`` as Markdown text: HTML (a run's name, a command) shown, never rendered."""
    return plain(value).replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|").replace("\n", " ")


def markdown(result: CheckResult) -> str:
    mark = "✅" if result.passed else "❌"
    lines = [f"### {mark} tensorgauge check: {_cell(result.current)} against {_cell(result.baseline)}", "",
             f"**{'Within its limits' if result.passed else 'Failed'}**"
             + (f": the run {_cell(result.not_completed)}" if result.not_completed else ""), "",
             "| check | baseline | now | change | limit | noise | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for c in result.checks:
        a, b = c.describe().split(": ", 1)[1].split(" -> ")
        verdict = {"fail": "**fail**", "within noise": "within noise", "pass": "pass"}[c.verdict]
        lines.append(f"| {_cell(c.name)} | {_cell(a)} | {_cell(b.rsplit(' (', 1)[0])} | {(c.ratio - 1):+.0%} | "
                     f"{c.limit - 1:+.0%} | {c.noise - 1:+.0%} | {verdict} |")
    lines += ["", *[f"Not compared: {_cell(why)}" for why in result.not_compared]] if result.not_compared else []
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
    """One test suite: a test case for the run's completion, one per check (and one for new findings when
    they fail the check)."""
    cases = []
    causes = "\n".join(f"{i}. {c}" for i, c in enumerate(result.causes, 1))
    cut = result.not_completed
    body = (f"<failure message={quoteattr(plain(cut))} type=\"not_completed\">{escape(plain(cut))}: "
            f"{CUT_NOTE}</failure>" if cut else "")
    cases.append(f"  <testcase classname=\"tensorgauge.check\" name=\"completed\">{body}</testcase>")
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
