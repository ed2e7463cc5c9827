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
# Two pytest workers on two cores: one BLAS thread each, or they fight over the cores.
PYTEST_WORKERS ?= 2

.PHONY: book site test site-test library setup torch lock checks colab unit lowest latest python notebooks browser clean release

setup: $(STAMP)

# The installer: uv (https://docs.astral.sh/uv/), into .venv beside pip. It installs what pip would from
# the same requirements, but downloads and unpacks in parallel. Here (2026-11-27), requirements.txt took
# 17 s and 28 s of CPU against pip's 56 s and 54 s (both with their caches filled; 24 s with uv's empty),
# and the lowest-versions environment 39 s against about 105 s.
UV := $(BIN)/uv
$(UV):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "uv>=0.5"

# One lock, one installer. requirements.txt names what .venv needs (this checkout, editable, with its
# [book] and [site] extras, and the test tools) with lower bounds; requirements.lock pins every package
# that resolves to, for every Python from 3.10 (`make lock` writes it), and uv installs exactly that,
# with --no-deps: nothing is resolved on the user's machine, so `make` here, `.ci/run` and a reader's
# fresh clone get the same versions, whatever the newest release or the machine's pip configuration.
# The Colab-like run (tests/test_colab.py) takes its packages from this .venv, so it runs them too.
# torch is installed first (`make torch`), at the lock's version: the lock leaves out the CUDA libraries
# (nvidia-*, cuda-*, triton) that PyPI's Linux build pulls in, so a machine without an NVIDIA GPU gets
# the CPU build (a wheel in $$PIP_FIND_LINKS if the machine has one, else PyTorch's CPU index) and a
# machine with one gets PyPI's CUDA build with the libraries its release pins.
# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (as on this project's machines), Python never
# writes the .pyc files an installer left out, and every process compiles each module it imports again
# (without them the Colab-like run took half as long again).
LOCK := requirements.lock
TORCH_PIN ?= $(shell grep -m1 -o -E '^torch==[^ ;]+' $(LOCK))
$(STAMP): $(LOCK) pyproject.toml | $(UV)
	$(MAKE) --no-print-directory torch
	$(UV) pip install --python $(BIN)/python --quiet --compile-bytecode --no-deps -r $(LOCK)
	$(BIN)/python -m pip check
	touch $(STAMP)

# torch at the lock's version, kept if .venv has it (either build).
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

# The lock, made anew: the newest versions requirements.txt and pyproject.toml allow, for Python 3.10 and
# later on every platform, torch at TORCH_PIN (`make lock TORCH_PIN=torch==X.Y.Z` moves it), without the
# CUDA libraries (see above). Commit it with what it changes, after `make test` passed with it.
lock: | $(UV)
	{ sed -n '/^#/!q;p' $(LOCK); \
	  $(UV) pip compile requirements.txt --universal --python-version 3.10 --no-header --no-annotate --quiet \
	    -c <(echo "$(TORCH_PIN)") | grep -v -E '^(nvidia-|cuda-|triton)'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)

# -W: warnings are errors; -n: nit-picky (every reference must resolve); --keep-going: report all.
# A section that raises fails the build (nb_execution_raise_on_error in _config.yml).
# One BLAS thread per process: the chapters' models are small, and on a busy 2-core machine extra
# threads slow them down several times over (OMP_NUM_THREADS can still be set by the caller).
# `make book` empties the execution cache and Sphinx's record of what it read (.doctrees) first, so it
# reads and executes every section itself, even over an earlier build.
book: $(STAMP)
	rm -rf _build/.jupyter_cache _build/.jupyter_cache.lock _build/.doctrees
	$(MAKE) --no-print-directory site

# The site, taking each section's outputs from the execution cache (_build/.jupyter_cache) where its
# code is unchanged, executing the others (_config.yml: execute_notebooks: cache).
site: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/jupyter-book build . -W -n --keep-going

# Each section executes once. After .venv's install, two jobs share the two cores:
#   - the Colab-like run (two sections at a time), which checks every section and stores its outputs in
#     the execution cache; then the site, built from that cache and checked in the browser (two
#     workers). This is the longer job: everything else must fit beside it;
#   - beside it, at the lowest priority (nice 19), the library's tests (`library`): first at the lowest
#     versions, installing their environment, then at .venv's, then at the newest, two workers each. They take what the
#     first job leaves idle (its first section runs alone while it installs the library, its last
#     sections end one by one, the site builds on one core, the browser waits on pages), and both
#     cores once it ends.
# Both cores stay busy from the first test to the last (vmstat, 2026-11-27): `make test` takes about the
# CPU time of its checks over two cores (.ci/run: 735 s, for 1,216 s of user and system time).
# (The two installs at once had made .venv's, which everything waits for, take three times as long.)
# A failure does not stop the other checks (one run reports everything, and fails if anything failed).
# The library's tests write to _build/library.log, printed at the end.
test: $(STAMP)
	status=0; mkdir -p _build; \
	nice -n 19 $(MAKE) --no-print-directory library > _build/library.log 2>&1 & library=$$!; \
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory colab || status=$$?; \
	OMP_NUM_THREADS=1 $(MAKE) --no-print-directory site-test || status=$$?; \
	wait $$library || status=1; \
	echo "=== the library's tests, at the lowest versions and at .venv's (make library, beside the above):"; \
	{ grep -v 'WARNING: Location' _build/library.log || true; }; \
	exit $$status

# The library's tests at the lowest versions, at .venv's (the lock's), then at the newest (a failure in
# one still runs the others). The shipped model's test BLEU is decoded once per version set: greedy at
# the lowest and newest versions, the headline's beam search at .venv's (each a pass over the 1,000 test
# sentences, about 20 s of CPU).
library:
	status=0; $(MAKE) --no-print-directory lowest || status=$$?; \
	  $(MAKE) --no-print-directory unit UNIT_DESELECT=$(GREEDY_BLEU) || status=$$?; \
	  $(MAKE) --no-print-directory latest || status=$$?; exit $$status

site-test: site
	$(MAKE) --no-print-directory browser

# Everything but the browser test: every section as a Colab reader runs it, then the library's tests.
checks: $(STAMP)
	status=0; $(MAKE) --no-print-directory colab || status=$$?; $(MAKE) --no-print-directory unit || status=$$?; exit $$status

# Every section executed as a Colab reader runs it (tests/test_colab.py: nbmake, two sections at a time,
# in a kernel of a runtime without the library, the section's own set-up cell installing it from this
# clone), each stored in the execution cache for the site build. The cache is emptied first, so the
# site shows this run's outputs.
colab: $(STAMP)
	rm -rf _build/.jupyter_cache _build/.jupyter_cache.lock
	OMP_NUM_THREADS=1 COLAB_WORKERS=$(PYTEST_WORKERS) $(BIN)/python -m pytest tests/test_colab.py

# The library's tests alone (no chapter executes: tests/test_colab.py is left out). UNIT_DESELECT: test
# ids to leave out (`make library` leaves out what `make lowest` checked).
UNIT_DESELECT ?=
unit: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal --durations=25 --doctest-modules transformer_lib tests -m "not browser" \
	  --ignore=tests/test_colab.py $(foreach test,$(UNIT_DESELECT),--deselect '$(test)')

# The library's unit tests at the lowest versions pyproject.toml declares (requirements-lowest.txt pins
# them) on the lowest Python it declares, in their own .venv-lowest: what `pip install` may give a user
# is what a test passed with. The book's tests need the book's libraries and are left out.
LOWEST_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) python3.10)
LOWEST_VENV := .venv-lowest
# The book's own tests (by name, or importing transformer_lib.book) need the book's libraries, and the ONNX
# export's the [onnx] extra: left out.
# The files with the longest tests come first (the shipped model's test BLEU, the compiled training
# run), so that the workers do not end on one long test while the other waits (--dist worksteal hands
# what is left to an idle worker).
LOWEST_FIRST := tests/test_pretrained.py tests/test_trainer.py
LOWEST_TESTS = $(LOWEST_FIRST) $(filter-out $(LOWEST_FIRST) tests/test_book% tests/test_colab.py tests/test_site% tests/test_install.py tests/test_lock.py tests/test_onnx%,\
  $(shell grep -L -E '^(from transformer_lib\.book|from transformer_lib import book|import transformer_lib\.book)' tests/test_*.py))
LOWEST_WORKERS ?= $(PYTEST_WORKERS)
# Left out at the lowest versions: the shipped model's test BLEU with beam search (24 s of decoding).
# There the shipped file's numbers are checked by its greedy test BLEU over the same 1,000 sentences
# (the same loading, model and sacrebleu), and beam search itself by tests/test_decoding.py. In
# `make test`, .venv's run leaves out the greedy one instead (`library`, above): each once.
SHIPPED_BLEU := tests/test_pretrained.py::test_the_shipped_file_reproduces_its_recorded_test_bleu
LOWEST_DESELECT := "$(SHIPPED_BLEU)[chosen]"
GREEDY_BLEU := "$(SHIPPED_BLEU)[greedy]"
# Also left out there: the tests marked end_to_end (pyproject.toml), which train until a target is
# reached (the command line's reverse run, each position option, the decoder-only model) or run a
# whole training command in processes of their own (resuming after a signal, under torchrun): 46 s of
# the 171 s these tests took at the lowest versions (2026-11-27). What they call is tested there by
# quicker tests (the trainer's steps, resuming and stopping at a target; each position option's
# attention against its formula; the signal handler and its checkpoint; two processes under
# torch.distributed), and they run at .venv's versions in `make unit`.
lowest: $(LOWEST_VENV)/.installed
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) $(LOWEST_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  -n $(LOWEST_WORKERS) --dist worksteal --durations=10 -m "not end_to_end" --deselect $(LOWEST_DESELECT) $(LOWEST_TESTS)

# requirements-lowest.txt is a complete lock (see its header): --no-deps keeps triton out. uv's cache for
# it lies inside the environment's folder, so that what it unpacks is hard-linked into the environment
# (the same disk), and goes once installed: the disk holds one copy, about 4.5 GB. `pip check` must find
# nothing missing but triton.
LOWEST_UV_CACHE := $(LOWEST_VENV)/.uv-cache
$(LOWEST_VENV)/.installed: requirements-lowest.txt | $(UV)
	test -x $(LOWEST_VENV)/bin/python || $(LOWEST_PYTHON) -m venv $(LOWEST_VENV)
	$(LOWEST_VENV)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version'
	status=0; UV_CACHE_DIR=$(LOWEST_UV_CACHE) $(UV) pip install --python $(LOWEST_VENV)/bin/python --quiet \
	  --compile-bytecode --no-deps -r requirements-lowest.txt || status=$$?; rm -rf $(LOWEST_UV_CACHE); exit $$status
	{ $(LOWEST_VENV)/bin/python -m pip check || true; } | { ! grep -v -e 'requires triton' -e '^No broken requirements'; }
	touch $@

# The library's tests at the newest versions pyproject.toml's ranges allow, without the lock: a new
# release of torch (PyPI's newest is a CUDA build, several GB, which runs on a CPU too) or of any other
# dependency that breaks something shows here first. .venv-latest is kept between runs and upgraded to
# what PyPI has today (uv's cache keeps a repeated run quick), with [words] (spaCy), as `make lowest`'s lock
# has it. The same tests as `make lowest` (the
# library's, not the book's, nor tests/test_lock.py, which checks .venv against the lock).
LATEST_VENV := .venv-latest
latest: | $(UV)
	test -x $(LATEST_VENV)/bin/python || $(PYTHON) -m venv $(LATEST_VENV)
	$(UV) pip install --python $(LATEST_VENV)/bin/python --quiet --compile-bytecode --upgrade -e .[words] pytest pytest-xdist hypothesis pyyaml
	$(LATEST_VENV)/bin/python -c 'import torch; print("make latest: torch", torch.__version__)'
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) $(LATEST_VENV)/bin/python -m pytest -p no:cacheprovider -q \
	  -n $(PYTEST_WORKERS) --dist worksteal --durations=10 -m "not end_to_end" --deselect $(LOWEST_DESELECT) $(LOWEST_TESTS)

# The same tests on another Python (`make python PY=3.13`; 3.12 and 3.13 passed on 2026-11-27), in
# .venv-py<PY> with the newest versions uv resolves there (PyPI's CUDA build of torch, several GB).
PY ?= 3.13
python: | $(UV)
	test -x .venv-py$(PY)/bin/python || $(UV) venv --quiet --python $(firstword $(wildcard $(HOME)/.pyenv/versions/$(PY)*/bin/python$(PY)) python$(PY)) .venv-py$(PY)
	$(UV) pip install --python .venv-py$(PY)/bin/python --quiet --upgrade .[words] pytest hypothesis pyyaml
	OMP_NUM_THREADS=1 PYTHONPATH=$(CURDIR) .venv-py$(PY)/bin/python -m pytest -p no:cacheprovider -q $(LOWEST_TESTS)

# Every chapter under nbmake in this checkout's .venv, two at a time: the quick check while writing one.
notebooks: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --nbmake book

# The browser test over the site in _build/html (build it first: `make book`), and the check of its
# downloadable executed notebooks (tests/test_site_downloads.py). It enforces issue 25's limits on
# every page (12 screens at 1280x900, 18 at 390x844, code at most 20% of a page, nothing cut at either
# size or in print). Screenshots, and a report of what each page showed, go to $(SCREENSHOTS); the
# summary (with the per-page table of screens, code share and cut elements) is printed even on failure.
# SITE_DIR=<another build's _build/html> SCREENSHOTS_DIR=<folder> checks another build (before/after).
# Two pytest workers, each with its own Chromium: one kept about 1.4 cores busy, waiting on the
# browser the rest of the time. Alone here (2026-11-27), the 61 page tests took 182 s in one process
# and 130 s in two.
SCREENSHOTS := $(or $(SCREENSHOTS_DIR),_build/screenshots)
browser: $(STAMP)
	@test -x /usr/bin/chromium || command -v chromium >/dev/null || \
	  echo "!!!!!!!! No Chromium: the browser test will NOT check the website (CI installs it, see .ci/run)"
	rm -rf $(SCREENSHOTS)
	status=0; $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal \
	  tests/test_site.py tests/test_site_downloads.py tests/test_book_trained_pages.py || status=$$?; \
	  $(BIN)/python tests/test_site.py; exit $$status

# A release (README, "Releasing"): `make release VERSION=X.Y.Z` (tools/release.py says what it changes).
release: $(STAMP)
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=X.Y.Z"; exit 2; }
	$(BIN)/python tools/release.py $(VERSION)

clean:
	rm -rf _build .pytest_cache
