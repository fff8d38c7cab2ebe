"""Closed vocabularies shared across layers: the failure classes, and reading a word back.

The five failure classes of the debugging guide (and unknown): signatures
(diagnose/signatures/), lint rules and report.json's `diagnosis.class` all say one of
these. A Literal, so report.json keeps the plain strings it always had and mypy checks
every comparison; a module with no imports of safelaunch's, so lint (which sits below
diagnose) uses the same one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, TypeVar, get_args

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

Word = TypeVar("Word", bound=str)


def word_of(text: str, words: Sequence[Word]) -> Word | None:
    """`text` as one of a vocabulary's words (a Literal's values, read from a file), or None."""
    return next((word for word in words if word == text), None)


def failure_class(text: str) -> FailureClass:
    """A class named in a user's file; TypeError (naming the classes) if it is none."""
    klass = word_of(text, CLASSES)
    if klass is None:
        raise TypeError(f"class {text!r} is not one of {', '.join(CLASSES)}")
    return klass
