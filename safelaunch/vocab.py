"""Closed vocabularies shared across layers: their one idiom, the failure classes, reading back.

Every closed vocabulary of safelaunch's is a `StrEnum` (below): its members are strs, so
json.dumps, f-strings and comparisons give the plain words report.json, the console and
every file always had, and mypy checks each use. Python 3.10 has no enum.StrEnum, hence
this base. A module with no imports of safelaunch's, so every layer (lint, which sits
below diagnose, included) uses it; code inside a rank (safelaunch/rank/) does not import
it: enum costs a rank's start, and the rank writes the plain words.

The five failure classes of the debugging guide (and unknown): signatures
(diagnose/signatures/), lint rules and report.json's `diagnosis.class` all say one of these.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import TypeVar


class StrEnum(str, Enum):
    """A str Enum whose members print and format as their values, as 3.11's enum.StrEnum."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)


class Switch(StrEnum):
    """A setting that safelaunch decides unless told: --isolate and --color."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


class FailureClass(StrEnum):
    ENVIRONMENT = "environment/launch"
    COMMUNICATION = "communication"
    DATA = "data/sampling"
    MODEL = "model/gradient"
    RESOURCES = "resources"
    UNKNOWN = "unknown"


# The members under the short names the signature tables and lint rules write.
ENVIRONMENT = FailureClass.ENVIRONMENT
COMMUNICATION = FailureClass.COMMUNICATION
DATA = FailureClass.DATA
MODEL = FailureClass.MODEL
RESOURCES = FailureClass.RESOURCES
UNKNOWN = FailureClass.UNKNOWN
CLASSES: tuple[FailureClass, ...] = tuple(FailureClass)


# The words of a live snapshot (rundir/live_file.py): the supervisor writes them, `status`
# reads them; here, so that status needs none of the launch's modules to read them.
class NodeSnapshotState(StrEnum):
    """A snapshot's "state": its launcher's attempt runs, or has ended."""

    RUNNING = "running"
    ENDED = "ended"


class RankSnapshotState(StrEnum):
    """A rank's "state" in a snapshot: what the supervisor knows of its process."""

    NOT_STARTED = "not started"
    RUNNING = "running"
    EXITED = "exited"


Word = TypeVar("Word", bound=StrEnum)


def word_of(text: object, words: Iterable[Word]) -> Word | None:
    """`text` (read from a file) as the member of a vocabulary (or of some of its members)
    whose value it is, or None."""
    return next((word for word in words if word == text), None)


def failure_class(text: str) -> FailureClass:
    """A class named in a user's file; TypeError (naming the classes) if it is none."""
    klass = word_of(text, FailureClass)
    if klass is None:
        raise TypeError(f"class {text!r} is not one of {', '.join(CLASSES)}")
    return klass
