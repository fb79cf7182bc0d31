"""The documentation's generated pages follow the code, and the README stays a short guide."""

import re
from dataclasses import fields
from pathlib import Path

from tensorgauge.model import Event, GpuReading, RunRecord, Sample
from tensorgauge.render.schema_page import markdown, run_document_keys

ROOT = Path(__file__).resolve().parent.parent


def test_the_schema_page_lists_every_declared_field_and_every_key_of_the_run_document():
    page = markdown()
    for record in (RunRecord, Sample, GpuReading, Event):
        for f in fields(record):
            assert f"| `{f.name}` | " in page, (record.__name__, f.name)
    assert all(f"`{key}`" in page for key in run_document_keys())
    assert "CREATE TABLE IF NOT EXISTS samples" in page


def test_the_readme_is_short_keeps_the_two_make_commands_and_tells_no_history():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme and 'pip install "tensorgauge[tensorflow]"' in readme
    for text in [readme] + [p.read_text() for p in (ROOT / "docs").glob("*.md")]:
        assert not re.search(r"\bissue[s]? #?\d", text, re.IGNORECASE)


def test_every_page_the_readme_links_exists():
    readme = (ROOT / "README.md").read_text()
    for target in re.findall(r"\]\(((?:docs|tensorgauge)/[^)#]*)", readme):
        assert (ROOT / target).exists(), target
