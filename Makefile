# dsbench: `make demo` runs the main job on the embedded default, `make test` runs the whole suite.
# Both create .venv and install everything on first use (torch as the pinned CPU wheel).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?= --durations=15

.PHONY: venv demo test test-unit test-dist check lint format docs configs schema bench-overhead clean

$(STAMP): setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip
	# -qq: errors only (setuptools prints an informational box for every editable install)
	$(BIN)/pip install -qq -c constraints.txt -e '.[train,report,dev]'
	touch $(STAMP)

venv: $(STAMP)

# The default comparison: gpt2-mini on the embedded corpus, 2 CPU ranks, single/ddp/fsdp/zero1/zero2/zero3/
# zero2+cpu offload; writes runs/compare-*/report/report.html.
demo: venv
	$(BIN)/dsbench compare

# The unit tests run on both cores (pytest-xdist), and so do the real launches: two files at a time, each file
# (and the test bed's three) on one worker, a launch filling the core the other's leaves idle (docs/testing.md).
# INTEGRATION= runs them one after another.
# The system packages (apt) install in the background from the first second, beside the venv's install and the
# unit tests, which do not need them; the integration tests wait for them (scripts/ensure_system_deps.sh).
# DeepSpeed's JIT ops build in the background once the venv is there, beside the unit tests and the first
# (torch-only) launches (scripts/prebuild_ops.py). async_io needs libaio-dev from the system packages: the
# integration conftest builds it after the others and waits for all of them.
INTEGRATION ?= -n 2 --dist loadgroup
SYSTEM_DEPS := build/system-deps
test:
	scripts/ensure_system_deps.sh --start $(SYSTEM_DEPS)
	$(MAKE) --no-print-directory venv
	$(BIN)/python scripts/prebuild_ops.py --detach --no-async-io
	$(BIN)/python -m pytest tests/unit -n 2 $(PYTEST_ARGS)
	scripts/ensure_system_deps.sh --wait $(SYSTEM_DEPS)
	$(BIN)/python -m pytest tests/integration tests/gpu $(INTEGRATION) $(PYTEST_ARGS)

test-unit: venv
	$(BIN)/python -m pytest tests/unit -n 2 $(PYTEST_ARGS)

# While working: lint and the unit suite (about 2 minutes on 2 cores; README.md).
check: lint test-unit

test-dist: venv
	$(BIN)/python -m pytest tests/integration $(INTEGRATION) $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check dsbench tests scripts

# The documentation site from docs/ (mkdocs-material; the home page is the README) into site/.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

format: venv
	$(BIN)/ruff check --fix dsbench tests scripts

# Re-render the shipped preset configs (ds_configs/*.json, "auto" kept for the HF Trainer).
configs: venv
	for p in $$($(BIN)/python -c "import json;print(' '.join(json.load(open('ds_configs/presets.json'))))"); do \
		rm -f ds_configs/$$p.json && $(BIN)/dsbench render --preset $$p --keep-auto -o ds_configs/$$p.json; done

# Regenerate dsbench/data/ds_schema.json from the installed DeepSpeed.
schema: venv
	$(BIN)/python scripts/gen_ds_schema.py

# Harness overhead: minimal DeepSpeed loop vs dsbench.train, same ZeRO-2 config, interleaved.
bench-overhead: venv
	$(BIN)/python scripts/bench_harness_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache runs
