# Set-up and the main jobs. `make demo` and `make test` each create .venv when
# missing. torch is installed first and pinned, so a CPU machine never pulls a
# CUDA build of several GB through a looser requirement.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN := torch==2.13.0
# One torch thread per process: on a 2-core machine oversubscription made small
# updates up to ten times slower.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: demo test test-all bench clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)

$(VENV)/.installed-dev: $(PY) pyproject.toml
	$(PIP) install -q -e ".[dev,baselines]" $(TORCH_PIN)
	touch $@

demo: $(VENV)/.installed-dev
	$(VENV)/bin/trader demo

test: $(VENV)/.installed-dev
	$(PY) -m pytest -q

test-all: $(VENV)/.installed-dev
	$(PY) -m pytest -q -m ""

bench: $(VENV)/.installed-dev
	$(PY) benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV)
