#!/usr/bin/env bash
# GPU acceptance: installs safelaunch from this tree into the machine's python (offline,
# no dependencies fetched) and checks it against a real GPU, NVML, CUDA and NCCL: one
# PASS/FAIL/SKIP line per check with its time, summary.json/summary.txt and the run logs
# (artifacts.tar.gz) in OUT_DIR. Every check has its own timeout; the budget is their
# sum (~9 minutes at most after the install, typically far less).
#
#   bash scripts/gpu_acceptance.sh [OUT_DIR]    # default: $OUT, else ./gpu_acceptance_out
#   PYTHON=/path/to/python (default python3: the one with a CUDA build of torch)
#   GPU_ACCEPTANCE_ONLY=doctor,cuda-oom to run some checks only
#
# Without a GPU it says so in one line, every check is SKIP, exit 0. Exit 1 when a check
# failed or the budget cut it (CUT: not run, not green). See docs/gpu-acceptance.md.
set -euo pipefail
out="${1:-${OUT:-gpu_acceptance_out}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
exec "${PYTHON:-python3}" scripts/gpu/acceptance.py --out "$out" \
    ${GPU_ACCEPTANCE_ONLY:+--only "$GPU_ACCEPTANCE_ONLY"}
