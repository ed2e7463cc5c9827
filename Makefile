# The two commands of this project (see README.md):
#   make book   build the website into _build/html, executing every chapter
#   make test   every check: unit, reference and property tests, every notebook (nbmake),
#               and a headless browser over the built site
# Both create .venv and install everything on first use. A torch already in .venv is kept, so a
# CPU-only machine can pre-install the CPU build of PyTorch (see README, and .ci/run).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Two pytest workers on two cores: one BLAS thread each, or they fight over the cores.
PYTEST_WORKERS ?= 2

.PHONY: book test setup unit notebooks browser clean

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# -W: warnings are errors; -n: nit-picky (every reference must resolve); --keep-going: report all.
# A chapter that raises fails the build (nb_execution_raise_on_error in _config.yml).
book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going

test: book
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --doctest-modules transformer_lib tests --nbmake book

unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --doctest-modules transformer_lib tests -m "not browser"

notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --nbmake book

clean:
	rm -rf _build .pytest_cache
