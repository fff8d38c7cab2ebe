"""The five failure classes of the debugging guide (and unknown): one closed vocabulary.

Signatures (diagnose/signatures.py), lint rules and report.json's `diagnosis.class` all
say one of these. A Literal, so report.json keeps the plain strings it always had and
mypy checks every comparison; a module of its own, with no imports, so lint (which sits
below diagnose) uses the same one.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

FailureClass = Literal[
    "environment/launch", "communication", "data/sampling", "model/gradient", "resources", "unknown"
]

ENVIRONMENT: Final = "environment/launch"
COMMUNICATION: Final = "communication"
DATA: Final = "data/sampling"
MODEL: Final = "model/gradient"
RESOURCES: Final = "resources"
UNKNOWN: Final = "unknown"
CLASSES: tuple[FailureClass, ...] = get_args(FailureClass)


def failure_class(text: str) -> FailureClass:
    """A class named in a user's file; TypeError (with the classes) if it is none."""
    for klass in CLASSES:
        if klass == text:
            return klass
    raise TypeError(f"class {text!r} is not one of {', '.join(CLASSES)}")
