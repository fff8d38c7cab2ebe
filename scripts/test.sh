#!/usr/bin/env bash
# Sets up .venv (the launcher, test tools, CPU torch 2.13.0) and runs the tests.
#
#   scripts/test.sh [PYTEST ARGS]  every test but the `slurm` group (what a plain machine
#                                  can run; it changes nothing outside this checkout)
#   scripts/test.sh --slurm        only the `slurm` group, on a real single-host SLURM cluster.
#                                  Unless one is already up, it starts one
#                                  (scripts/ci/slurm-cluster.sh), which AS ROOT installs
#                                  slurm and munge with apt, writes /etc/slurm, /etc/munge,
#                                  a line of /etc/hosts and /var/{spool,log}/slurm*, and
#                                  starts the daemons (stopped again afterwards): meant for
#                                  CI machines. Not root or no apt: the group is skipped.
#
# .ci/run runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet -e '.[test]'
if [ "${1:-}" = --slurm ]; then
    shift
    # One process: the group submits all its jobs once, from a session fixture.
    exec .venv/bin/python -m pytest -m slurm tests/test_slurm.py "$@"
fi
# Two workers: most tests wait on real processes (hang timeouts, teardowns) rather than
# compute, so two at a time fit 2 cores; PYTEST_WORKERS=0 runs them in one. A -m of yours
# replaces "not slurm" (pytest keeps the last).
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" -m "not slurm" "$@"
