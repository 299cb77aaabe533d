# One entry point for people and CI. Every target works on a fresh machine: when no virtual
# environment is active it creates .venv and installs userdp with its dev extras into it.
ifdef VIRTUAL_ENV
PY := python
USERDP := userdp
STAMP := .venv-active.stamp
else
PY := .venv/bin/python
USERDP := .venv/bin/userdp
STAMP := .venv/.installed.stamp
endif

.PHONY: help setup test test-all audit fuzz lint typecheck check bench demo clean

help:
	@echo "make test      - set up (if needed) and run the fast test tier (no end-to-end jobs)"
	@echo "make test-all  - every default test, end-to-end jobs included (what CI runs)"
	@echo "make audit     - privacy audits with 10^6 samples per side (slow)"
	@echo "make fuzz      - the full malformed-input corpus: hundreds of runs (slow)"
	@echo "make check     - ruff lint + format check + mypy"
	@echo "make bench     - every benchmark: samplers, throughput, multi-core, accuracy (slow)"
	@echo "make demo      - set up (if needed) and run the demo release"

$(STAMP): pyproject.toml
ifndef VIRTUAL_ENV
	python3 -m venv .venv
endif
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

setup: $(STAMP)

# Two tiers: `test` leaves out the tests marked slow (whole jobs, audits at 10^5 samples); `test-all` runs
# everything but the long audits and the full fuzz corpus (pyproject's addopts).
test: $(STAMP)
	$(PY) -m pytest -q -m 'not slow_audit and not slow_fuzz and not slow'

test-all: $(STAMP)
	$(PY) -m pytest -q

audit: $(STAMP)
	$(PY) -m pytest -q -m slow_audit tests/audit

fuzz: $(STAMP)
	$(PY) -m pytest -q -m slow_fuzz tests/pipelines/test_malformed_inputs.py

lint: $(STAMP)
	$(PY) -m ruff check userdp transforms pipelines tests benchmarks examples
	$(PY) -m ruff format --check userdp transforms pipelines tests benchmarks examples

typecheck: $(STAMP)
	$(PY) -m mypy

check: lint typecheck

bench: $(STAMP)
	$(PY) benchmarks/samplers.py
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/multicore.py
	$(PY) benchmarks/shifted_inverse.py
	-$(PY) benchmarks/auto_bound.py  # exits 1 while a target is missed (docs/accuracy.md)
	$(PY) benchmarks/auto_bound_plot.py  # redraws docs/images/auto-bound.png (same bytes if nothing changed)
	$(PY) benchmarks/local_sensitivity.py
	$(PY) benchmarks/smooth_window.py
	$(PY) benchmarks/sample_aggregate.py
	$(PY) benchmarks/library.py  # PipelineDP row: add --pipelinedp-python PATH
	$(PY) benchmarks/accuracy.py  # PipelineDP rows: add --pipelinedp-python PATH
	$(PY) benchmarks/shared_selection.py

demo: $(STAMP)
	$(USERDP) demo

clean:
	rm -rf .venv .venv-active.stamp .pytest_cache .mypy_cache .ruff_cache
