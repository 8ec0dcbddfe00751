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
# The test suites run in one pytest-xdist worker per core, two at most (CI has two); each
# worker is a process of one torch thread. --dist loadfile: each test file goes whole to one
# worker, so a module-wide fixture (a tournament, a backtest, a cluster) is built once.
# `make test TEST_WORKERS=1` runs in one worker. `make test` ends with its 15 slowest test steps.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 2 ? n : 2 )))
PARALLEL = -n $(TEST_WORKERS) --dist loadfile

# `make docs`: docs/configuration.md is generated from the config dataclasses, then the docs site
# (mkdocs.yml: the guides, the API reference from the docstrings) is built into site/, strictly:
# a broken link, a page missing from the nav or a docstring mkdocstrings cannot read fails it.
.PHONY: docs demo test test-all test-browser screenshots chromium iproute2 dashboard bench rllib real-data gpu clean-venv

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)

$(VENV)/.installed-dev: $(PY) pyproject.toml
	$(PIP) install -q -e ".[dev,baselines]" $(TORCH_PIN)
	touch $@

# DATASET: another recipe, e.g. `make demo DATASET=nasdaq100-minute` (needs Yahoo).
demo: $(VENV)/.installed-dev
	$(VENV)/bin/trader demo $(if $(DATASET),--dataset $(DATASET))

docs: $(VENV)/.installed-dev
	$(PY) -m tools.config_reference
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

test: $(VENV)/.installed-dev iproute2
	$(PY) -m pytest -q --durations=15 $(PARALLEL)

test-all: $(VENV)/.installed-dev iproute2
	$(PY) -m pytest -q -m "" $(PARALLEL)

# iproute2 (`ip netns`, veth, bridge) for the multi-host tests (tests/test_cluster_hosts.py,
# which also need root): Debian's package, installed with apt-get where it is missing and
# we are root or have sudo. Elsewhere nothing is installed and those tests skip.
iproute2:
	@if command -v ip >/dev/null; then :; \
	elif command -v apt-get >/dev/null && { [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null; }; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q iproute2; \
	else echo "iproute2: ip is missing and cannot be installed here; the namespace tests will skip" >&2; fi

# Headless Chromium for the browser tests and the screenshots: Debian's packages,
# installed with apt-get where it is available (as root, or through sudo).
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif command -v apt-get >/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver; \
	else echo "chromium: no apt-get here; install Chromium and ChromeDriver by hand" >&2; exit 1; fi

test-browser: $(VENV)/.installed-dev chromium
	$(PY) -m pytest -q -m browser

# The dashboard and its screenshots read the run directories in RUNS (default runs/,
# where `make demo` writes).
RUNS ?= runs
dashboard: $(VENV)/.installed-dev
	$(VENV)/bin/trader dashboard $(RUNS)

screenshots: $(VENV)/.installed-dev chromium
	$(PY) tools/dashboard_screenshots.py $(RUNS) --out docs/img

# RLlib baselines (`trader baselines RUN_DIR --baselines rllib`): Ray pins its own gymnasium,
# so RLlib gets an environment of its own with the same torch and this package; the
# two exchange files only (trader/libraries/rllib.py).
RLLIB_VENV := .venv-rllib
RAY_PIN := ray[rllib]==2.60.0
rllib: $(RLLIB_VENV)/.installed

$(RLLIB_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(RLLIB_VENV)
	$(RLLIB_VENV)/bin/python -m pip install -q --upgrade pip
	$(RLLIB_VENV)/bin/python -m pip install -q $(TORCH_PIN)
	$(RLLIB_VENV)/bin/python -m pip install -q -e . "$(RAY_PIN)" $(TORCH_PIN)
	touch $@

# `make real-data`: real daily closes for recipe sp500-20-daily (datasets/README.md). The venv's pip
# downloads the wheel of skfolio (BSD-3; fetched, not installed: only its two data files are read),
# the converter checks it against the sha256 it pins and writes datasets/data/skfolio-sp500/,
# whole or not at all. Needs PyPI once; a second `make real-data` finds the files and does nothing.
REAL_DATA := datasets/data/skfolio-sp500
real-data: $(REAL_DATA)/closes.parquet

$(REAL_DATA)/closes.parquet: datasets/convert_skfolio_sp500.py | $(VENV)/.installed-dev
	$(PY) datasets/convert_skfolio_sp500.py --download --out $(REAL_DATA)

# `make gpu`: MuJoCo Warp (market_envs/warp_mujoco.py: Ant and Humanoid stepped as one batch on the
# device) into .venv, pinned to the installed mujoco 4.0.0. warp-lang runs on CUDA and on the CPU
# alike, so the tests can run here too (slowly). Never part of `make test`: without it those tests skip.
# It adds to the venv that `make test` or `make demo` made and reinstalls nothing of the project.
WARP_PINS := mujoco-warp==4.0.0 warp-lang==1.19.0 mujoco==4.0.0
gpu: $(PY)
	$(PIP) install -q $(WARP_PINS) $(TORCH_PIN)

bench: $(VENV)/.installed-dev
	$(PY) benchmarks/run_all.py

clean-venv:
	rm -rf $(VENV) $(RLLIB_VENV)
