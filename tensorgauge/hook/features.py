"""The in-job features, each a module that registers its listeners (see :mod:`.listeners`)
when imported; they are loaded in this order. A new feature: one module and one entry here."""

from __future__ import annotations

import importlib

FEATURES = ("budget", "fixes", "diagnose", "batch_finder", "input_window", "train_loop", "jax_loop", "torch_loop",
            "dataset_facts", "memory_facts", "placement", "fit_input", "tfinfo", "usage",
            "call_sites", "verify_run")


def load_features() -> None:
    for name in FEATURES:
        importlib.import_module(f"tensorgauge.hook.{name}")
