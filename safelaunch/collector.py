"""The cyclic garbage collector paused around work that only allocates.

Parsing a script (lint) and importing modules (the launcher's judging modules) create
many objects and no garbage cycles worth finding: each sets off collections that free
nothing. Reference counting still frees everything; the previous state comes back.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside; the collector's previous state (on or off) afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
