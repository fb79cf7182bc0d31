"""``tensorgauge fix``: a run's findings turned into edits of the job's own code, checked safe to make.

``sites`` reads where the job's code made its pipeline and called compile (recorded by the hook);
``plan`` decides the edits from the findings; ``codemods`` makes each on the source's syntax tree;
``patch`` checks, shows and writes them; ``outcome`` judges a verified rerun.
"""
