# The two commands that matter: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test bench proto clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/poolctl demo

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n 2

bench: $(BIN)/.installed
	for b in bench/*.py; do $(BIN)/python $$b || exit 1; done

proto: $(BIN)/.installed
	$(BIN)/python -m protos.codegen

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
