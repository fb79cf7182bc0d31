# Set-up and the two commands of the README. Everything installs into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-durations lint docs docs-screenshots bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# One stamp per set of extras, redone when pyproject.toml changes.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,gpu,report,fix]"
	touch $@

# "2.21.*" for the TensorFlow installed (tensorflow-cpu on x86-64, tensorflow elsewhere)
TF_MINOR = import importlib.metadata as m; \
	d = {x.metadata["Name"].lower().replace("_", "-"): x.version for x in m.distributions()}; \
	print(".".join((d.get("tensorflow-cpu") or d["tensorflow"]).split(".")[:2]) + ".*")

# tf-keras (legacy tf.keras, for its tests) requires the package `tensorflow`, which
# would install a second TensorFlow over tensorflow-cpu: take it without dependencies.
# Every TensorFlow process the suite starts (about 80) imports numpy's ml_dtypes and, where it can, JAX: ml_dtypes
# 0.7.0's extension takes 0.65 s to import (0.6.0: 3 ms), so the suite keeps 0.6; JAX (0.45 s) is installed
# apart, on PYTHONPATH for the JAX tests alone (TENSORGAUGE_TEST_JAX_PATH, scripts/install-apart).
# The report test opens the page in headless Chromium (Debian's package).
JAX_APART := $(VENV)/jax-apart
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,gpu,report,tensorboard,postgres,prometheus,otlp,profile,fix,dev]" \
	  "ml_dtypes<0.7"
	$(BIN)/python scripts/install-apart $(JAX_APART) ".[jax]" jax jaxlib
	$(BIN)/python -m pip install --quiet --no-deps "tf-keras==$$($(BIN)/python -c '$(TF_MINOR)')"
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/tensorgauge demo

# The suite's parts run in processes beside each other, as many as the idle cores allow (scripts/test-suite
# says how; TEST_WORKERS=N sets the number of processes for the tests that compute). Bytecode is kept
# (__pycache__, ignored by git) even where PYTHONDONTWRITEBYTECODE is set: each process's collection rewrites
# the tests' asserts, 7 s of every start without it.
test: export PYTHONDONTWRITEBYTECODE :=
test: export TENSORGAUGE_TEST_JAX_PATH := $(CURDIR)/$(JAX_APART)
test: $(VENV)/.installed-test
	$(BIN)/ruff check tensorgauge tests benchmarks
	$(BIN)/python scripts/test-suite

# tests/durations.json, by which the suite orders its tests (the longest first), from a run of the whole suite.
test-durations: export PYTHONDONTWRITEBYTECODE :=
test-durations: export TENSORGAUGE_TEST_JAX_PATH := $(CURDIR)/$(JAX_APART)
test-durations: $(VENV)/.installed-test
	url=$$(scripts/postgres-for-tests start || true); export TENSORGAUGE_TEST_POSTGRES=$$url; \
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --store-durations; status=$$?; \
	scripts/postgres-for-tests stop; exit $$status

lint: $(VENV)/.installed-test
	$(BIN)/ruff check tensorgauge tests benchmarks
	$(BIN)/mypy

# The documentation site (Material for MkDocs), into build/site; the finding pages and the schema page
# are written from the package when it is built (scripts/mkdocs_hooks.py).
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# The screenshots of the report and of `show` (docs/images), made from the demo in headless Chromium.
docs-screenshots: $(VENV)/.installed-test
	PATH=$(CURDIR)/$(BIN):$$PATH scripts/docs-screenshots docs/images

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/sampler_overhead.py
	$(BIN)/python benchmarks/hook_overhead.py
	$(BIN)/python benchmarks/tool_cost.py
	$(BIN)/python benchmarks/input_verdict.py
	$(BIN)/python benchmarks/diagnose_accuracy.py
	$(BIN)/python benchmarks/report_build.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
