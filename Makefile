# The two commands of the README, `make demo` and `make test`, a quicker test subset, `make test-quick`,
# `make lint`: the layout is the formatter's and the linter's (configured in pyproject.toml), checked in CI,
# and `make docs`: the documentation site, built offline with warnings as errors, as CI builds it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv demo test test-quick lint docs clean

# setuptools' editable build prints an informational box ("Editable installation.") even under
# --quiet: that one warning is filtered out, any other still shows
$(BIN)/lbtrain: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e '.[train,offline,test,plots,docs]'
	touch $@

venv: $(BIN)/lbtrain

# Trains MNIST-LSTM on the embedded real digits at the base batch and at 16x with LEGW.
demo: venv
	$(BIN)/python scripts/demo.py

test: venv
	$(BIN)/python -m pytest -q -n 2 --dist=worksteal --durations=30 tests

# The fast part of the suite: the optax library and its API reference, the configs, --help, the progress line and
# the README's quick blocks (`pytest -m "not slow" tests` is everything but the end-to-end runs, and takes most
# of `make test`).
QUICK_TESTS := tests/optim tests/engine/test_config.py tests/engine/test_help.py tests/engine/test_progress.py tests/docs
test-quick: venv
	$(BIN)/python -m pytest -q -m "not slow" $(QUICK_TESTS)

# `$(BIN)/ruff format .` lays a file out; `$(BIN)/ruff check --fix .` sorts its imports.
lint: venv
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# The site (docs/conf.py): docs/*.md as its pages (MyST) and the API reference of lbtrain.optim from its
# docstrings (autodoc), into build/docs/html. -W: a warning fails the build.
DOCS_OUT ?= build/docs/html
docs: venv
	$(BIN)/sphinx-build -W --keep-going -q -b html docs $(DOCS_OUT)

clean:
	rm -rf $(VENV) runs build/docs
