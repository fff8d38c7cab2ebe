# Thin wrappers: each target runs the same command the README shows.
.PHONY: setup example test test-slurm lint bench doctor clean

VENV := .venv
PY := $(VENV)/bin/python

setup:  ## a virtual environment with safelaunch, CPU torch 2.13.0 and the test tools
	python3 -m venv $(VENV) && $(VENV)/bin/pip install -e '.[test]'

example: setup  ## a real 2-rank DDP job on CPU
	$(VENV)/bin/safelaunch --nproc_per_node=2 scripts/train_toy_ddp.py

test:  ## every test but the SLURM group (sets up .venv itself)
	scripts/test.sh

test-slurm:  ## the SLURM group: as root it installs and configures SLURM here (scripts/test.sh)
	scripts/test.sh --slurm

lint: setup  ## style, formatting, types, import contracts
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/mypy && $(VENV)/bin/lint-imports

bench: setup  ## safelaunch against torchrun, ratios printed
	$(PY) bench/vs_torchrun.py && $(PY) bench/per_rank.py && $(PY) bench/hang_detection.py

doctor: setup  ## every preflight check on this machine, without launching
	$(VENV)/bin/safelaunch doctor

clean:
	rm -rf safelaunch_logs .pytest_cache .mypy_cache .ruff_cache
