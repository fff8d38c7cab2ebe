"""Writes this rank's environment, argv and interpreter flags as JSON into $PIDS_DIR."""

import json
import os
import sys

path = os.path.join(os.environ["PIDS_DIR"], f"env{os.environ['RANK']}.json")
with open(path, "w") as out:
    json.dump(
        {
            "env": dict(os.environ),
            "argv": sys.argv,
            "orig_argv": sys.orig_argv,
            "name": __name__,
            "path0": sys.path[0],
            "pid": os.getpid(),
            "sid": os.getsid(0),
            "pgid": os.getpgid(0),
        },
        out,
    )
