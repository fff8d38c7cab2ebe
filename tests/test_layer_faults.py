"""The generated exception faults, scored: a class for nearly every one, and the right one.

exception_faults.py raises ~35 kinds of fault from real layers (the user's code, the
standard library, torch's subsystems, a third-party package) in one process that imports
torch once, and writes real rank logs; here they are classified through diagnose(), as
a launch does. bench/exception_faults.py runs hundreds; CI samples 40 with a fixed seed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import exception_faults

SEED = 25
COUNT = 40


def test_generated_faults_get_their_class(tmp_path: Path) -> None:
    generator = Path(__file__).parent / "exception_faults.py"
    command = [sys.executable, str(generator), str(tmp_path), "--seed", str(SEED)]
    subprocess.run([*command, "--count", str(COUNT)], check=True, capture_output=True, timeout=300)
    faults = exception_faults.read_faults(tmp_path)
    assert len(faults) == COUNT
    score = exception_faults.score(faults)
    assert score["unknown"] <= 5.0, score
    assert score["agreement"] >= 90.0, score
