"""The run directory: the contract between the code in a rank and every later stage.

Each record has one home here: its path, its type, its writer and its reader. Nothing
else in safelaunch builds a run-directory file name (tests/test_rundir_contract.py).
This package imports nothing of safelaunch's and little of the standard library: the
rank writes its records through it before the user's code starts.

| record | path (`<private>`: the 0700 directory, per attempt) | module |
|---|---|---|
| layout | `<log dir>/<run id>/attempt_<n>/`, reruns, `latest` | layout |
| rank logs | `<attempt>/rank<N>.log`, `rank<N>.error.json`, `launcher.log` | rank_logs |
| heartbeat | `<private>/rank<N>.json` (the rank) | heartbeat_file |
| exit | `<private>/rank<N>.exit.json` (the rank) | exit_file |
| backend | `<attempt>/rank<N>.comm.json` (the rank) | comm_file |
| Gloo ledger | `<attempt>/rank<N>.collectives.log` (the rank, in a rerun) | ledger_file |
| call ledger | `<attempt>/rank<N>.calls.log`, `rank<N>.calls.old.log` (the rank) | calls_file |
| flight record | `<attempt>/flight/rank<N>.json`, torch's `flight-rank<N>` | flight_file |
| stacks | `<private>/rank<N>.stacks` (the rank), `<attempt>/stacks/` | stack_files |
| live state | `<attempt>/live/node<k>.json`, `history-node<k>.json` | live_file |
| verdict | `<attempt>/report.json`, `<run>/report.html`, `timeline.json` | report_file |

`jsontext` writes the rank's JSON without the json module, `frozen` gives the rank's
records a frozen type without the dataclasses module (both: launch cost), `writing`
replaces the launcher's files atomically.
"""
