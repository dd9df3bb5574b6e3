# Two commands: `make lab` opens the notebooks, `make test` runs every test.
# Both create .venv on first use and reuse it while the requirements are unchanged.
# `make report` runs every notebook and collects what it measured (build/report/summary.md).
PYTHON ?= python3
VENV   := .venv
ifeq ($(OS),Windows_NT)
BIN    := $(VENV)/Scripts
else
BIN    := $(VENV)/bin
endif
STAMP  := $(VENV)/.installed
# Extra JupyterLab options, e.g. make lab LAB_ARGS="--no-browser --port=8890"
LAB_ARGS ?=
# Jupyter refuses to run as root (containers, CI) unless told it may.
AS_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)
# Tests run in the small `ci` profile unless you ask for another one. Bytecode is written
# (into .venv and __pycache__, both ignored by git): without it every import of torch and d2l
# recompiles from source, which costs tens of seconds per notebook.
export PYTHONDONTWRITEBYTECODE :=
TEST_PROFILE := $(or $(D2L_PROFILE),ci)
# Executed notebooks (REPORT_DIR/notebooks/) and the summary of their figures; ignored by git.
REPORT_DIR := build/report

# USE_CURRENT_ENV=1 runs every target with $(PYTHON) as it is (a GPU runner's image, a conda
# environment, often offline): no .venv, nothing installed; d2l_extras comes from this checkout
# through PYTHONPATH, and tools/check_env.py lists whatever the target needs and is missing.
USE_CURRENT_ENV ?=
ifneq ($(filter 1 yes true,$(USE_CURRENT_ENV)),)
PY     := $(PYTHON)
ready   = env-$(1)
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),$(if $(filter Windows_NT,$(OS)),;,:)$(PYTHONPATH))
else
PY     := $(BIN)/python
ready   = $(STAMP)
endif
# What `make test` runs; a subset: make test TESTS="tests/test_report.py notebooks/02-asynchronous-computation.ipynb"
# Notebooks first: tests/test_decks.py then cuts its decks from nbval's runs instead of its own.
TESTS  ?= notebooks tests
# Two pytest-xdist workers: the notebooks (and the tests that reuse their runs) on one, the
# other tests on both as they free up; about 40% less time than one process on two cores.
# TEST_JOBS=0 (or an environment without pytest-xdist) runs everything in one process.
TEST_JOBS ?= 2
XDIST   = $(if $(filter-out 0,$(TEST_JOBS)),$(shell $(PY) -c "import xdist" 2>/dev/null \
          && echo --numprocesses=$(TEST_JOBS)))
NBVAL  := --nbval-lax --nbval-current-env --nbval-cell-timeout=600 \
          --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test unit notebooks figures report slides html setup clean compat

setup: $(call ready,run)

env-%:
	$(PY) -m tools.check_env $*

# The stamp is newer than the requirement files once they are installed,
# so a second `make` installs nothing. uv installs the 5 GB of requirements about four times
# faster than pip; it is a package on the index, so pip bootstraps it into the new .venv. Where
# uv cannot be installed or cannot install (no wheel for the platform, an index only pip knows),
# pip does the work. UV=0 skips uv.
UV ?= 1
UV_INSTALL  = $(BIN)/python -m uv pip install --quiet --python $(BIN)/python
PIP_INSTALL = $(BIN)/python -m pip install --quiet --disable-pip-version-check
$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if [ "$(UV)" != 0 ] && $(PIP_INSTALL) uv && $(UV_INSTALL) -r requirements.txt; then \
	  install="$(UV_INSTALL)"; \
	else \
	  echo "installing with pip (uv is not available here)"; install="$(PIP_INSTALL)"; \
	  $(PIP_INSTALL) --upgrade pip && $$install -r requirements.txt || exit 1; \
	fi; \
	set -x; $$install --no-deps -r requirements-nodeps.txt && $$install --no-deps -e .
	touch $(STAMP)

# The server's root is the repository, so that the notebooks' figures (../images/) load;
# it opens on notebooks/.
# The notebooks name the generic python3 kernel: Jupyter started from .venv (or, with
# USE_CURRENT_ENV=1, from that Python) runs it with its own interpreter.
lab: $(call ready,lab)
	$(PY) -m jupyter lab --notebook-dir=. --ServerApp.default_url=/lab/tree/notebooks \
	  $(AS_ROOT) $(LAB_ARGS)

# MPLBACKEND=Agg, as headless runners set it: the notebooks must draw inline all the same, and
# tests/test_decks.py fails a slide whose cell draws but shows no figure.
test: $(call ready,test)
	D2L_PROFILE=$(TEST_PROFILE) MPLBACKEND=Agg $(PY) -m pytest $(XDIST) $(TESTS) $(NBVAL)

unit: $(call ready,test)
	D2L_PROFILE=$(TEST_PROFILE) $(PY) -m pytest $(XDIST) tests

notebooks: $(call ready,test)
	D2L_PROFILE=$(TEST_PROFILE) $(PY) -m pytest notebooks $(NBVAL)

# Notebook 04's measurements (#@save) against independent ones (NumPy, timeit, published GPU
# peaks): printed and written to build/bench/hwbench.{json,md}; never fails on a ratio.
.PHONY: bench
bench: $(call ready,test)
	D2L_PROFILE=$(TEST_PROFILE) $(PY) benchmarks/hwbench_compare.py --out build/bench

# Execute every notebook in the active profile (D2L_PROFILE, default class) and summarize the
# figures they recorded with dx.record; exits non-zero if a notebook failed.
report: $(call ready,report)
	$(PY) -m tools.report --out $(REPORT_DIR)

# Every GPU path in one short command (tools/gpucheck.py): the notebooks in three parallel lanes
# in the class profile and the tests that need a GPU (pytest -m gpu, the probes of
# tests/test_gpu_probes.py among them), stopped at GPU_CHECK_DEADLINE seconds; 6 files in
# GPU_CHECK_OUT, env.txt from torch.utils.collect_env. About 8 minutes on one H100. Without a
# GPU it stops at once; GPU_CHECK_DRY=1 runs the same lanes with CUDA hidden, in the ci profile.
GPU_CHECK_OUT ?= build/gpu-check
GPU_CHECK_DEADLINE ?= 420
.PHONY: gpu-check
gpu-check: $(call ready,gpu-check)
	GPU_CHECK_OUT=$(GPU_CHECK_OUT) GPU_CHECK_DEADLINE=$(GPU_CHECK_DEADLINE) $(PY) -m tools.gpucheck

# Run every notebook RUNS times in the profile (D2L_PROFILE, default class) and list each printed
# reading whose words (numbers masked) changed between runs, and each notebook's run times;
# exits non-zero if one changed. Not part of `make test`: three class runs take half an hour.
RUNS ?= 3
.PHONY: readings
readings: $(call ready,report)
	D2L_PROFILE=$(or $(D2L_PROFILE),class) $(PY) -m tools.report --runs $(RUNS) --out build/readings

# The notebooks as reveal.js decks (build/slides/) and as static pages with their outputs
# (build/html/), each with an index.html and local copies of reveal.js and MathJax (they work
# offline). Built from the copies `make report` executed, which it reruns when a notebook is newer.
slides html: $(call ready,site) $(REPORT_DIR)/summary.json
	$(PY) -m tools.nbsite $@ --notebooks $(REPORT_DIR)/notebooks \
	  --summary $(REPORT_DIR)/summary.json --out build/$@

$(REPORT_DIR)/summary.json: $(wildcard notebooks/*.ipynb) | $(call ready,report)
	$(MAKE) report

# The notebooks as students get them (build/student/notebooks/): every worked solution removed
# (the BEGIN SOLUTION regions that nbgrader and otter-grader read), every check still runs.
# STUDENT_ARGS=--run also executes them, in the active profile, and fails if one does not run.
STUDENT_ARGS ?=
.PHONY: student
student: $(call ready,report)
	$(PY) -m tools.student --out build/student $(STUDENT_ARGS)

# The tests on the stacks students and runners have (noxfile.py, run by nox): sessions torch-2.6,
# torch-2.11 and torch-newest (the newest on the index; COMPAT_TORCH="2.8 newest" picks others),
# each `make test USE_CURRENT_ENV=1` (TESTS too) in an environment of its own with that torch,
# and hosted: every notebook copied alone into an empty folder and run on a hosted platform's
# stack (torch, torchvision, ipykernel, nbclient), its set-up cell installing this checkout.
# About 20 GB of environments under build/compat/ and an hour; nox's summary says what passed.
# COMPAT_ARGS takes nox's options: COMPAT_ARGS="-s torch-2.6", "-s hosted", "-l" (list);
# D2L_HOSTED_NOTEBOOKS="00 06" runs those two alone instead of all.
# With USE_CURRENT_ENV=1 that Python needs nox and uv (pip install nox uv).
COMPAT_PYTHON ?= python3.12
COMPAT_ARGS ?=
compat: $(call ready,compat)
	COMPAT_PYTHON="$(COMPAT_PYTHON)" $(PY) -m nox $(COMPAT_ARGS)

# Write the notebooks' #@save code into d2l_extras (tools/save.py; only the standard library):
# run it after editing a saved cell; tests/test_save.py fails while a generated module is stale.
.PHONY: lib
lib:
	$(PYTHON) -m tools.save

# Regenerate the figures in images/ from the scripts beside them.
figures: $(call ready,run)
	for f in images/[!_]*.py; do $(PY) $$f images || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache $(REPORT_DIR) build/compat
