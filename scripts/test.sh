#!/usr/bin/env bash
# Sets up .venv (the launcher, test tools, CPU torch 2.13.0) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet -e '.[test]'
# Two workers: most tests wait on real processes (hang timeouts, teardowns, SLURM jobs)
# rather than compute, so two at a time fit 2 cores; PYTEST_WORKERS=0 runs them in one.
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" "$@"
