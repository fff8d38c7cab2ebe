"""Frozen records for the files a rank writes, without the dataclasses module.

The rank writes its heartbeat, exit, backend and flight records through the same modules
the launcher reads them with (one home per record), so those modules load in every rank
before the user's code starts. `import dataclasses` costs a rank ~13 ms there (inspect
and re; `python -S -X importtime -c "import dataclasses"`), more than the bootstrap's own
~7 ms over a bare interpreter (bench/per_rank.py). This base gives what the launcher uses
of a frozen, keyword-only dataclass: the constructor (typed for mypy by
dataclass_transform), defaults, immutability, equality, repr and `as_dict`. Records only
the launcher touches (live state, report) are plain dataclasses.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs every rank at start; only mypy needs it
if TYPE_CHECKING:
    from typing import dataclass_transform
else:

    def dataclass_transform(**_: object) -> object:
        return lambda cls: cls


@dataclass_transform(frozen_default=True, kw_only_default=True)
class Record:
    """Subclasses declare their fields as annotations (a default as a class attribute)."""

    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        inherited = tuple(f for base in cls.__mro__[1:] for f in vars(base).get("_fields", ()))
        own = tuple(n for n in vars(cls).get("__annotations__", {}) if not n.startswith("_"))
        cls._fields = inherited + tuple(n for n in own if n not in inherited)

    def __init__(self, **values: object) -> None:
        for name in self._fields:
            if name in values:
                object.__setattr__(self, name, values.pop(name))
            elif not hasattr(type(self), name):
                raise TypeError(f"{type(self).__name__} needs {name}")
        if values:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(values))}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self._fields}

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Record)
            and type(other) is type(self)
            and (self.as_dict() == other.as_dict())
        )

    def __hash__(self) -> int:
        return hash((type(self), *self.as_dict().values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({shown})"
