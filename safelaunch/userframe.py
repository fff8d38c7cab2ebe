"""The user's own innermost frame of a stack: what `status`, hang analysis and diagnosis show.

A leaf (no imports of safelaunch's): `safelaunch status` needs it without the diagnose
package, whose import pulls in the launch's modules (~0.2 s of CPU on a loaded node).
"""

from __future__ import annotations

from collections.abc import Sequence

# Installed libraries, and safelaunch's own in-rank wrappers (an editable install
# is outside site-packages): never the user's code.
LIBRARY_PARTS = ("site-packages", "dist-packages", "/lib/python", "<frozen", "safelaunch/rank/")


def user_frame(
    innermost_first: Sequence[tuple[str, object, str]],
    *,
    also_skip: tuple[str, ...] = (),
    fallback: bool = False,
) -> str | None:
    """The innermost frame outside installed libraries as `path:line in func`.

    With `fallback`, the innermost frame when none is the user's; else None.
    """
    skip = LIBRARY_PARTS + also_skip
    for path, line, function in innermost_first:
        if not any(part in path for part in skip):
            return f"{path}:{line} in {function}"
    if fallback and innermost_first:
        path, line, function = innermost_first[0]
        return f"{path}:{line} in {function}"
    return None
