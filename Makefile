# Two commands: `make lab` opens the notebooks, `make test` runs every test.
# Both create .venv on first use and reuse it while the requirements are unchanged.
PYTHON ?= python3
VENV   := .venv
ifeq ($(OS),Windows_NT)
BIN    := $(VENV)/Scripts
else
BIN    := $(VENV)/bin
endif
STAMP  := $(VENV)/.installed
KERNEL := d2l-perf
# Extra JupyterLab options, e.g. make lab LAB_ARGS="--no-browser --port=8890"
LAB_ARGS ?=
# Jupyter refuses to run as root (containers, CI) unless told it may.
AS_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root,)
# Tests run in the small `ci` profile unless you ask for another one. Bytecode is written
# (into .venv and __pycache__, both ignored by git): without it every import of torch and d2l
# recompiles from source, which costs tens of seconds per notebook.
export PYTHONDONTWRITEBYTECODE :=
TEST_PROFILE := $(or $(D2L_PROFILE),ci)
NBVAL  := --nbval-lax --nbval-current-env --nbval-cell-timeout=600 \
          --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: lab test unit notebooks figures setup clean

setup: $(STAMP)

# The stamp is newer than the requirement files once they are installed,
# so a second `make` installs nothing.
$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) \
	  --display-name "Python (d2l computational performance)"
	touch $(STAMP)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks $(AS_ROOT) $(LAB_ARGS)

test: $(STAMP)
	D2L_PROFILE=$(TEST_PROFILE) $(BIN)/python -m pytest tests notebooks $(NBVAL)

unit: $(STAMP)
	D2L_PROFILE=$(TEST_PROFILE) $(BIN)/python -m pytest tests

notebooks: $(STAMP)
	D2L_PROFILE=$(TEST_PROFILE) $(BIN)/python -m pytest notebooks $(NBVAL)

# Regenerate the figures in images/ from the scripts beside them.
figures: $(STAMP)
	for f in images/*.py; do $(BIN)/python $$f images || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache
