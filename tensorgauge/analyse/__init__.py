"""Analysis: pure functions from a recorded run to summaries, phases and findings.

No I/O here; everything is tested on hand-built runs.
"""
