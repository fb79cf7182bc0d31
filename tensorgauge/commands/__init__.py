"""One module per verb of the ``tensorgauge`` command: each takes typed arguments
and returns the exit code. Modules whose name starts with ``_`` are shared by
several verbs; no verb imports another."""
