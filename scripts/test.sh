#!/usr/bin/env bash
# Sets up .venv (the launcher, test tools, CPU torch 2.13.0) and runs the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet -e '.[test]'
exec .venv/bin/python -m pytest "$@"
