# The two commands of this project (see README.md):
#   make book   build the website into _build/html, executing every chapter
#   make test   every check: every section run as on Colab (tests/test_colab.py, nbmake), then the
#               site built from those runs and a headless browser over it; beside them the unit,
#               reference and property tests, at the lowest declared versions (Python 3.10), at .venv's
#               (requirements.lock) and at the newest the declared ranges allow (`make latest`)
# Both create .venv and install everything on first use, at the versions requirements.lock pins
# (torch's CPU build on a machine without an NVIDIA GPU, its CUDA build where there is one).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Two pytest workers (the machines have two cores), one BLAS thread each.
PYTEST_WORKERS ?= 2

.PHONY: book site test site-test library setup torch lock checks colab unit types lowest latest python notebooks browser clean release

# .venv with everything the book and the tests need (below); `make book` and `make test` do it first.
setup: $(STAMP)

# The one installer, uv, into .venv: it ignores the machine's pip configuration, so every machine installs
# the same versions (benchmarks/README.md has its timings against pip).
UV := $(BIN)/uv
$(UV):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "uv>=0.5"

# .venv = requirements.lock exactly (--no-deps: nothing is resolved on the user's machine), torch first
# (`make torch`, as the lock leaves out torch's CUDA libraries). The Colab-like run takes its packages from
# .venv. --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set, nothing else writes the .pyc files.
LOCK := requirements.lock
TORCH_PIN ?= $(shell grep -m1 -o -E '^torch==[^ ;]+' $(LOCK))
$(STAMP): $(LOCK) pyproject.toml | $(UV)
	$(MAKE) --no-print-directory torch
	$(UV) pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps -r $(LOCK)
	$(BIN)/python -m pip check
	$(BIN)/python tools/site_widget.py --runtime-only
	touch $(STAMP)

# torch at the lock's version, kept if .venv has it: PyPI's CUDA build where `nvidia-smi` finds a GPU (or
# on macOS), else the CPU build ($$PIP_FIND_LINKS's wheel if there is one, else PyTorch's CPU index).
torch: | $(UV)
	@installed="$$($(BIN)/python -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)"; \
	if [ "torch==$$installed" = "$(TORCH_PIN)" ]; then exit 0; fi; \
	if nvidia-smi -L >/dev/null 2>&1 || [ "$$(uname)" = Darwin ]; then \
	  echo "Installing $(TORCH_PIN) from PyPI (CUDA build on Linux with an NVIDIA GPU)"; \
	  $(UV) pip install --python $(BIN)/python --quiet --compile-bytecode "$(TORCH_PIN)" -c $(LOCK); \
	else \
	  echo "No NVIDIA GPU: installing $(TORCH_PIN)+cpu, PyTorch's CPU build"; \
	  { [ -n "$${PIP_FIND_LINKS:-}" ] && $(UV) pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps \
	      --no-index --find-links "$$PIP_FIND_LINKS" "$(TORCH_PIN)+cpu" 2>/dev/null; } || \
	  $(UV) pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps "$(TORCH_PIN)+cpu" \
	      --index-url https://download.pytorch.org/whl/cpu; \
	fi

# The lock made anew from requirements.txt and pyproject.toml, for Python >= 3.10 on every platform, torch
# at TORCH_PIN (`make lock TORCH_PIN=torch==X.Y.Z`), without the CUDA libraries. The lock's versions are
# kept where they still fit (a new requirement adds what it needs); UPGRADE=1 takes the newest of all.
# Commit it after `make test` passed with it.
lock: | $(UV)
	cp $(LOCK) $(LOCK).new
	$(UV) pip compile requirements.txt --universal --python-version 3.10 --no-header --no-annotate --quiet \
	  -c <(echo "$(TORCH_PIN)") $(if $(UPGRADE),--upgrade) -o $(LOCK).new
	{ sed -n '/^#/!q;p' $(LOCK); grep -v -E '^(nvidia-|cuda-|triton)' $(LOCK).new; } > $(LOCK).tmp
	rm $(LOCK).new; mv $(LOCK).tmp $(LOCK)

# The website, every section executed anew (the execution cache, .doctrees and the old pages removed first).
book: $(STAMP)
	rm -rf _build/.jupyter_cache _build/.jupyter_cache.lock _build/.doctrees _build/html
	$(MAKE) --no-print-directory site

# The website from the execution cache, executing only changed sections; the build also exports the
# shipped model as ONNX for the page that translates (tools/site_widget.py, cached in _build/.widget_cache).
# -W -n: any warning or unresolved reference fails; a section that raises fails (_config.yml). One BLAS
# thread per process unless the caller sets OMP_NUM_THREADS: the chapters' models are small.
site: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/jupyter-book build . -W -n --keep-going

# Every check, each section executed once: the Colab-like run (its outputs fill the execution cache), then
# the site built from it and the browser test; beside them at nice 19 the library's tests (`library`,
# logged to _build/library.log and printed at the end), which use what the first job leaves idle.
# A failure does not stop the other checks; the run fails if any failed.
test: $(STAMP)
	status=0; mkdir -p _build; \
	nice -n 19 $(MAKE) --no-print-directory library > _build/library.log 2>&1 & library=$$!; \
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory colab || status=$$?; \
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory site-test || status=$$?; \
	wait $$library || status=1; \
	echo "=== the library's tests, at the lowest versions and at .venv's (make library, beside the above):"; \
	{ grep -v 'WARNING: Location' _build/library.log || true; }; \
	exit $$status

# The library's tests at the lowest versions, its types, its tests at .venv's (the lock's) and at the
# newest; a failure in one still runs the others. The shipped model's test BLEU: greedy at lowest and newest, beam at .venv's.
library:
	status=0; $(MAKE) --no-print-directory lowest || status=$$?; \
	  $(MAKE) --no-print-directory types || status=$$?; \
	  $(MAKE) --no-print-directory unit UNIT_DESELECT=$(GREEDY_BLEU) || status=$$?; \
	  $(MAKE) --no-print-directory latest || status=$$?; exit $$status

# The site from the Colab-like run's outputs, then the browser over it.
site-test: site
	$(MAKE) --no-print-directory browser

# Everything but the browser test and the other version sets.
checks: $(STAMP)
	status=0; $(MAKE) --no-print-directory colab || status=$$?; $(MAKE) --no-print-directory unit || status=$$?; exit $$status

# Every section as a Colab reader runs it (tests/test_colab.py: a runtime without the library, whose set-up
# cell installs it from this clone), two at a time, into an emptied execution cache for the site.
colab: $(STAMP)
	rm -rf _build/.jupyter_cache _build/.jupyter_cache.lock
	OMP_NUM_THREADS=1 COLAB_WORKERS=$(PYTEST_WORKERS) $(BIN)/python -m pytest tests/test_colab.py

# The library's and the book's tests at .venv's versions, no chapter executed. UNIT_DESELECT: test ids
# to leave out (`make library` leaves out what `make lowest` checked).
UNIT_DESELECT ?=
unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=25 --doctest-modules transformer_lib tests -m "not browser" \
	  --ignore=tests/test_colab.py $(foreach test,$(UNIT_DESELECT),--deselect '$(test)')

# The package's annotations checked by mypy ([tool.mypy] in pyproject.toml says what and how strictly):
# it ships py.typed, so users' type checkers read them.
types: $(STAMP)
	$(BIN)/python -m mypy

# The library's tests at the lowest versions and Python pyproject.toml declares (requirements-lowest.txt),
# in .venv-lowest: what `pip install` may give a user is what a test passed with.
LOWEST_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) python3.10)
LOWEST_VENV := .venv-lowest
# Left out there: the book's tests (they need its libraries), the [onnx] extra's and the lock's. The longest
# files come first, so that the two workers end together.
LOWEST_FIRST := tests/test_pretrained.py tests/test_trainer.py
LOWEST_TESTS = $(LOWEST_FIRST) $(filter-out $(LOWEST_FIRST) tests/test_book% tests/test_colab.py tests/test_site% tests/test_install.py tests/test_lock.py tests/test_onnx%,\
  $(shell grep -L -E '^(from transformer_lib\.book|from transformer_lib import book|import transformer_lib\.book)' tests/test_*.py))
LOWEST_WORKERS ?= $(PYTEST_WORKERS)
# The shipped model's test BLEU is decoded once per version set (see `library`).
SHIPPED_BLEU := tests/test_pretrained.py::test_the_shipped_file_reproduces_its_recorded_test_bleu
LOWEST_DESELECT := "$(SHIPPED_BLEU)[chosen]"
GREEDY_BLEU := "$(SHIPPED_BLEU)[greedy]"
# The end_to_end tests (whole training runs, pyproject.toml's marker) run at .venv's versions only; what
# they call has quicker tests that run everywhere.
lowest: $(LOWEST_VENV)/.installed
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) $(LOWEST_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  -n $(LOWEST_WORKERS) --dist worksteal --durations=10 -m "not end_to_end" --deselect $(LOWEST_DESELECT) $(LOWEST_TESTS)

# requirements-lowest.txt is a complete lock (--no-deps keeps triton out). uv's cache lies in the
# environment's folder (hard links on one disk) and goes once installed: one copy on disk.
LOWEST_UV_CACHE := $(LOWEST_VENV)/.uv-cache
$(LOWEST_VENV)/.installed: requirements-lowest.txt | $(UV)
	test -x $(LOWEST_VENV)/bin/python || $(LOWEST_PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version'
	status=0; UV_CACHE_DIR=$(LOWEST_UV_CACHE) $(UV) pip install --python $(LOWEST_VENV)/bin/python --quiet \
	  --compile-bytecode --no-deps -r requirements-lowest.txt || status=$$?; rm -rf $(LOWEST_UV_CACHE); exit $$status
	{ $(LOWEST_VENV)/bin/python -m pip check || true; } | { ! grep -v -e 'requires triton' -e '^No broken requirements'; }
	touch $@

# The same tests at the newest versions the declared ranges allow (no lock), in .venv-latest, upgraded each
# run: a new release that breaks something shows here first.
LATEST_VENV := .venv-latest
latest: | $(UV)
	test -x $(LATEST_VENV)/bin/python || $(PYTHON) -m venv $(LATEST_VENV)
	$(UV) pip install --python $(LATEST_VENV)/bin/python --quiet --compile-bytecode --upgrade -e .[words] pytest pytest-xdist hypothesis pyyaml
	$(LATEST_VENV)/bin/python -c 'import torch; print("make latest: torch", torch.__version__)'
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) $(LATEST_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  -n $(PYTEST_WORKERS) --dist worksteal --durations=10 -m "not end_to_end" --deselect $(LOWEST_DESELECT) $(LOWEST_TESTS)

# The same tests on another Python (`make python PY=3.13`), in .venv-py<PY>, newest versions.
PY ?= 3.13
python: | $(UV)
	test -x .venv-py$(PY)/bin/python || $(UV) venv --quiet --python $(firstword $(wildcard $(HOME)/.pyenv/versions/$(PY)*/bin/python$(PY)) python$(PY)) .venv-py$(PY)
	$(UV) pip install --python .venv-py$(PY)/bin/python --quiet --upgrade .[words] pytest hypothesis pyyaml
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) .venv-py$(PY)/bin/python -m pytest -p no:cacheprovider -q $(LOWEST_TESTS)

# Every chapter under nbmake in .venv, two at a time: the quick check while writing one.
notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --nbmake book

# The browser test over _build/html (build it first): every page at phone and laptop width and in print,
# against the limits tests/test_site.py states, the site's downloadable notebooks, and the page that
# translates (tests/test_site_widget.py: the shipped model in the browser against PyTorch). Screenshots and a
# per-page report go to $(SCREENSHOTS); SITE_DIR=<another build> checks another build. Two workers, each
# with its own Chromium.
SCREENSHOTS := $(or $(SCREENSHOTS_DIR),_build/screenshots)
browser: $(STAMP)
	@test -x /usr/bin/chromium || command -v chromium >/dev/null || \
	  echo "!!!!!!!! No Chromium: the browser test will NOT check the website (CI installs it, see .ci/run)"
	rm -rf $(SCREENSHOTS)
	status=0; $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal \
	  tests/test_site.py tests/test_site_downloads.py tests/test_book_trained_pages.py tests/test_site_widget.py || status=$$?; \
	  $(BIN)/python tests/test_site.py; exit $$status

# A release (README, "Releasing"): `make release VERSION=X.Y.Z` (tools/release.py says what it changes).
release: $(STAMP)
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=X.Y.Z"; exit 2; }
	$(BIN)/python tools/release.py $(VERSION)

# Build outputs and caches (the environments stay).
clean:
	rm -rf _build .pytest_cache
