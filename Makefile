# timekeeper: two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck check clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

## run: the app offline against moto's server (see README)
run: $(STAMP)
	$(BIN)/python -m local.run

## test: lint, types and the whole suite
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy app.py chalicelib deploy local tests bench
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy app.py chalicelib deploy local tests bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
