"""What a script sees of how it was started; prints one JSON line, then acts on ACTION."""

import json
import os
import pickle
import sys


class Point:
    """defined in __main__"""

    def __init__(self, x):
        self.x = x


def explode():
    raise ValueError("deliberate")


seen = {
    "name": __name__,
    "file": __file__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "doc": __doc__,
    "spec": repr(__spec__),
    "package": __package__,
    "cached": __cached__,
    "loader": type(__loader__).__name__,
    "pickled": pickle.loads(pickle.dumps(Point(3))).x,
    "point_module": Point.__module__,
    "sitecustomize": os.environ.get("SITECUSTOMIZE_RAN"),
}
print(json.dumps(seen), flush=True)
action = os.environ.get("ACTION", "")
if action == "raise":
    explode()
if action == "exit3":
    sys.exit(3)
if action == "exitmsg":
    sys.exit("goodbye message")
if action == "interrupt":
    raise KeyboardInterrupt
