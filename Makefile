# The two commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv demo test clean

$(BIN)/lbtrain: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[offline,test,plots]'
	touch $@

venv: $(BIN)/lbtrain

# Trains MNIST-LSTM on the embedded real digits at the base batch and at 16x with LEGW.
demo: venv
	$(BIN)/python scripts/demo.py

test: venv
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf $(VENV) runs
