"""MkDocs hooks (mkdocs.yml `hooks:`): the pages written from the package rather than kept by hand.

- findings/: an index and one page per registered finding, from tensorgauge.analyse.rule_docs (the
  words `tensorgauge explain ID` prints), added to the navigation under "Findings";
- `<!-- generated: schema -->` in a page: the records, tables and run document, from the declarations
  in tensorgauge/model.py and tensorgauge/store/schema.py.
"""

from __future__ import annotations

from mkdocs.structure.files import File

SCHEMA_MARK = "<!-- generated: schema -->"


def _docs():
    from tensorgauge.analyse.rule_docs import PAGES, ids

    return [PAGES[i] for i in sorted(ids(), key=lambda i: (("performance", "memory", "placement")
                                                              .index(PAGES[i].category), i))]


def on_config(config):
    nav = config.get("nav")
    if nav is not None:
        findings = [{"All findings": "findings/index.md"}] + [{d.id: f"findings/{d.id}.md"} for d in _docs()]
        for i, item in enumerate(nav):
            if isinstance(item, dict) and "Findings" in item:
                nav[i] = {"Findings": findings}
    return config


def on_files(files, config):
    from tensorgauge.render.rule_page import index_markdown, markdown

    docs = _docs()
    files.append(File.generated(config, "findings/index.md", content=index_markdown(docs)))
    for doc in docs:
        files.append(File.generated(config, f"findings/{doc.id}.md", content=markdown(doc)))
    return files


def on_page_markdown(markdown, page, config, files):
    if SCHEMA_MARK in markdown:
        from tensorgauge.render.schema_page import markdown as schema

        markdown = markdown.replace(SCHEMA_MARK, schema())
    return markdown
