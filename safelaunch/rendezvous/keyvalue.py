"""The store and torch's rendezvous as the rendezvous package sees them: two small types.

`KeyValue` is the few operations safelaunch asks of torch's store (torchstore.TextStore;
in-memory stand-ins in the tests); `Joined` is what torch's rendezvous returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class KeyValue(Protocol):
    """The few store operations used here (torchstore.TextStore over torch's TCPStore)."""

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> bytes: ...

    def add(self, key: str, amount: int) -> int: ...

    def check(self, keys: list[str]) -> bool: ...

    def multi_get(self, keys: list[str]) -> list[bytes]: ...  # one round trip; every key exists

    def wait(self, keys: list[str], seconds: float) -> bool: ...  # False: not all within

    def clone(self) -> KeyValue: ...  # over a connection of its own: the liveness beat's


@dataclass(frozen=True, slots=True, kw_only=True)
class Joined:
    """What torch's rendezvous returned."""

    node: int
    nodes: int
    master_addr: str
    master_port: int
    shutdown: Callable[[], Any]
    # the next round of the same rendezvous: (joined, store), torchstore.TextStore's
    next_round: Callable[[], tuple[Joined, KeyValue]] | None = None
    # c10d: how many nodes wait in torch's rendezvous for the next round (elastic scale-up)
    waiting: Callable[[], int] | None = None
