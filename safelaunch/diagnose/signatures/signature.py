"""A signature: how to recognise a failure, what it means, what to do next."""

from __future__ import annotations

from dataclasses import dataclass

from safelaunch.vocab import FailureClass


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A recognisable failure: how to spot it, what it means, what to do next."""

    id: str
    klass: FailureClass
    patterns: tuple[str, ...] = ()  # regular expressions over the rank's log (any may match)
    signals: tuple[int, ...] = ()  # or: the rank died of one of these signals
    meaning: str
    next_steps: tuple[str, ...]
    isolation_helps: bool = False  # a Gloo rerun can tell the network from the program
    consequence: bool = False  # seen on survivors after a peer died: never the root cause
