"""Hangs: the rules that declare one, the evidence taken, and its analysis.

One home around the heartbeat and stack records (safelaunch/rundir/): detection and
activity run in the supervisor, stack_evidence is taken there when a hang is declared,
analysis judges it with the diagnosis, live_dump serves `safelaunch status --stacks`.
Each module keeps to its stage (import-linter places them).
"""
