"""Isolation: after a failed job, reruns with one thing changed tell where the fault is.

The question that costs days is "NCCL/the network, or my code?". The job is rerun with
Gloo in place of NCCL (and, on request, with one rank, or with one NCCL transport
disabled at a time); comparing the two endings answers it. docs/isolation.md for users.

- policy.py: whether the Gloo rerun is worth its cost (a pure table).
- reruns.py: which reruns, what each changes, how far it runs (pure).
- evidence.py: what the ranks' files say, read in one place.
- verdicts.py: what a rerun's ending proves (pure, table-tested).
- record.py: the verdicts in the summary and in report.json.
- driver.py: runs the reruns (through attempt.run_attempt) and has them judged.

Nothing is imported here: the pure parts sit below the report layer, the driver above.
"""
