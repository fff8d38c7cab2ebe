"""The failure knowledge base: every known signature, as data, in this package.

Texts are the exact ones measured with torch 2.13 (shared/reference/diagnosis-facts.md);
GPU-only texts are known but were not reproduced here. Order matters: the first match
wins, so specific signatures come before generic ones. The table is in two parts,
setup.py then program.py, in matching order. Matching lives in match.py; what a
Gloo rerun cannot run, in gloo_limits.py.
"""

from __future__ import annotations

from safelaunch.diagnose.signatures.program import PROGRAM
from safelaunch.diagnose.signatures.setup import SETUP
from safelaunch.diagnose.signatures.signature import Signature

__all__ = ["CONSEQUENCES", "SIGNATURES", "Signature"]

SIGNATURES: tuple[Signature, ...] = (*SETUP, *PROGRAM)
# what survivors show after a peer died, never a cause of its own (Signature.consequence)
CONSEQUENCES: tuple[Signature, ...] = tuple(s for s in SIGNATURES if s.consequence)
