"""The rank's own JSON writer gives json.dumps's text (safelaunch/rundir/jsontext.py).

The launcher reads these records with json.loads; the writer exists only so that a rank
need not import json (and re) at start.
"""

from __future__ import annotations

import enum
import json

import pytest

from safelaunch.rundir.jsontext import dumps


class Number(enum.IntEnum):
    THREE = 3


class Text(str):
    pass


HEARTBEAT = {
    "version": 1,
    "pid": 4242,
    "time": 1764583200.123456,
    "since": 1764583199.5,
    "frames": [("/home/me/train.py", 27, "load_next_batch"), ["<string>", 1, "<module>"]],
    "depth": 14,
    "step": None,
    "seq": 7,
    "busy": True,
    "cost": 0.00021,
    "spins": False,
    "optimizer_steps": 0,
}
EXIT = {"how": "sys.exit", "code": "bad input", "frames": [], "time": 1.0, "seq": None}
COMM = {"requested": "nccl", "used": "gloo", "swapped": True, "groups": [[0, 1]], "ddp": False}
PHASES = {"counts": {"data": 3, "compute": 9}, "places": {"data": {"/a.py:3 in f": 3}}}


@pytest.mark.parametrize(
    "value",
    [
        HEARTBEAT,
        EXIT,
        COMM,
        PHASES,
        {},
        [],
        (),
        "",
        'quote " backslash \\ newline \n tab \t nul \x00 del \x7f é 中 \U0001f600',
        0,
        -1,
        10**40,
        1.5,
        -0.0,
        1e300,
        5e-324,
        float("nan"),
        float("inf"),
        -float("inf"),
        True,
        False,
        None,
        [1, [2, [3, {"deep": [None]}]]],
        {7: "int", 2.5: "float", True: "true", False: "false", None: "none"},
        Number.THREE,
        [Number.THREE, Text("text")],
        {Number.THREE: Text("key and value of subclasses")},
    ],
)
def test_the_same_text_as_json_dumps(value: object) -> None:
    assert dumps(value) == json.dumps(value)


@pytest.mark.parametrize("value", [object(), b"bytes", {1, 2}, 1j, {(1, 2): "tuple key"}])
def test_what_json_refuses_is_refused(value: object) -> None:
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        dumps(value)
