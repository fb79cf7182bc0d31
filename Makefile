# Set-up and the two commands of the README. Everything installs into .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# One stamp per set of extras, redone when pyproject.toml changes.
$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,gpu]"
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[tensorflow,gpu,dev]"
	touch $@

demo: $(VENV)/.installed-demo
	$(BIN)/tensorgauge demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/sampler_overhead.py
	$(BIN)/python benchmarks/hook_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
