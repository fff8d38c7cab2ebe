"""Flight records: asking the ranks for them, reading and comparing them.

One home around the flight record (safelaunch/rundir/flight_file.py): request runs in
the supervisor before ranks are stopped, check and records in a subprocess that imports
torch (its analyser), forensics judges the result with the diagnosis.
"""
