# timekeeper: two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run demo soak soak-fuzz bench test lint typecheck check clean deploy destroy console-screenshots

# The first `make run` or `make test` installs (about 10-20 seconds): one line per step with the seconds since
# the install began. uv (pinned, from PyPI) installs the pinned requirements about five times faster than pip; where
# uv cannot be had, pip installs them instead.
UV_VERSION := 0.13.9
STEP = @echo "[setup $$(( $$(date +%s) - $$(cat $(VENV)/.started) ))s]"
$(STAMP): requirements.txt requirements-dev.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "timekeeper needs Python 3.11 or newer (set PYTHON=python3.11); found " + sys.version.split()[0])'
	@echo "[setup 0s] creating $(VENV) with $$($(PYTHON) --version) (once)"
	@$(PYTHON) -m venv $(VENV)
	@date +%s > $(VENV)/.started
	$(STEP) installing requirements-dev.txt: the app, moto, pytest, ruff, mypy and the rest
	@if $(BIN)/pip install -q uv==$(UV_VERSION); then \
	    $(BIN)/uv pip install --python $(BIN)/python -r requirements-dev.txt; \
	else \
	    echo "uv $(UV_VERSION) could not be installed: pip installs instead (about a minute)"; \
	    $(BIN)/pip install --progress-bar on --upgrade pip && $(BIN)/pip install --progress-bar on -r requirements-dev.txt; \
	fi
	@touch $(STAMP)
	$(STEP) done: $(VENV) is ready

## run: the app offline against moto's server (docs/offline.md)
run: $(STAMP)
	$(BIN)/python -m local.run

## demo: a scripted scenario on the offline runtime; exits 0 only if all of it worked (docs/offline.md)
demo: $(STAMP)
	$(BIN)/python -m local.demo

## soak: the offline runtime under load (10,000 tasks: hours on 2 cores); not part of `make test` (docs/testing.md)
SOAK_TASKS ?= 10000
soak: $(STAMP)
	$(MAKE) soak-fuzz
	SEEDED_SOAK_TASKS=200 SEEDED_SOAK_TABLES=50 $(BIN)/pytest -n 0 -q -s tests/functional/test_seeded_soak.py
	$(BIN)/python -m local.soak --tasks $(SOAK_TASKS)

## bench: cost, speed, precision and scale against the seed designs (docs/benchmarks.md); BENCH_QUICK=1 for a 2-minute run (written to .local/bench-quick/)
bench: $(STAMP)
	$(BIN)/python -m bench

## deploy: provision STAGE's resources on AWS, chalice deploy, event-source settings (docs/deploying.md)
STAGE ?= dev
deploy: $(STAMP)
	$(BIN)/python -m deploy.cli deploy --stage $(STAGE)

## destroy: chalice delete + STAGE's resources, after typing the stage name (or CONFIRM=<stage>; DELETE_DATA=1 drops tables)
destroy: $(STAMP)
	$(BIN)/python -m deploy.cli destroy --stage $(STAGE)

## test: lint, types and the whole suite (mypy checks while the suite runs: its output follows the suite's)
# The suite's processes (two workers, moto servers, the offline runtime's handlers, the AWS CLI) import the
# same modules: Python's bytecode cache is written even where the environment turns it off (PYTHONDONTWRITEBYTECODE),
# so each module compiles once, not once a process.
test: export PYTHONDONTWRITEBYTECODE=
test: $(STAMP)
	$(BIN)/ruff check .
	@$(BIN)/mypy app.py chalicelib deploy local tests bench > $(VENV)/.mypy.out 2>&1 & types=$$!; \
	$(BIN)/pytest; suite=$$?; \
	wait $$types; checked=$$?; echo "mypy app.py chalicelib deploy local tests bench"; cat $(VENV)/.mypy.out; \
	exit $$(( suite || checked ))

## soak-fuzz: both API fuzzes with random seeds: 10,000 examples instead of 240, the OpenAPI-driven 5,000 instead of 200 (docs/testing.md)
soak-fuzz: $(STAMP)
	FUZZ_EXAMPLES=10000 $(BIN)/pytest -n 0 -q tests/functional/test_api_fuzz.py
	SCHEMA_FUZZ_EXAMPLES=5000 $(BIN)/pytest -n 0 -q tests/functional/test_api_schema_fuzz.py

## console-screenshots: refresh docs/console/*.png with the console's browser test (needs chromium and chromium-driver; docs/console.md)
console-screenshots: $(STAMP)
	CONSOLE_SCREENSHOTS=1 CONSOLE_BROWSER_REQUIRED=1 $(BIN)/pytest -n 0 tests/e2e/test_console_browser.py

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy app.py chalicelib deploy local tests bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
