"""What a Gloo isolation rerun cannot run, as data beside the failure signatures.

Not failures of the job: seen in a Gloo rerun they mean "this rerun cannot judge the
program", never a verdict (isolation matches them with the same engine, match.py).
Texts measured on CPU with torch 2.13; send/recv of CUDA tensors (GPU only) is not
reproduced here.
"""

from __future__ import annotations

from safelaunch.diagnose.signatures import Signature
from safelaunch.vocab import ENVIRONMENT

# What Gloo cannot do that NCCL can.
GLOO_LIMITS: tuple[Signature, ...] = (
    Signature(
        id="gloo-premul-sum",
        klass=ENVIRONMENT,
        patterns=(r"Cannot use ReduceOp\.PREMUL_SUM with Gloo",),
        meaning="the program reduces with ReduceOp.PREMUL_SUM (e.g. FSDP2 with a gradient "
        "divide factor), which only NCCL has",
        next_steps=("to use the Gloo rerun, reduce with SUM and scale the result yourself",),
    ),
    Signature(
        id="gloo-float8",
        klass=ENVIRONMENT,
        patterns=(r"Invalid scalar type",),
        meaning="a collective on a dtype Gloo does not support (float8)",
        next_steps=("to use the Gloo rerun, communicate in bfloat16 or float32",),
    ),
    Signature(
        id="gloo-uneven-all-gather",
        klass=ENVIRONMENT,
        patterns=(r"ProcessGroupGloo::allgather: invalid tensor size",),
        meaning="an all_gather with a different tensor size on each rank: NCCL accepts it, "
        "Gloo does not",
        next_steps=("to use the Gloo rerun, pad to the largest size before all_gather",),
    ),
    Signature(
        id="gloo-single-tensor",
        klass=ENVIRONMENT,
        patterns=(r"ProcessGroupGloo::\w+ takes a single tensor",),
        meaning="a point-to-point call with a tensor list, which Gloo does not take",
        next_steps=("to use the Gloo rerun, send one tensor per call",),
    ),
)
