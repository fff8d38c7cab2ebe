"""A C++ extension throws through a C boundary: std::terminate, `what():` on stderr."""

import ctypes
import os
import subprocess
import tempfile

import torch.distributed as dist

SOURCE = 'extern "C" void fused_op(){ throw std::runtime_error("fused_op: bad alignment"); }'


def build() -> str:
    directory = tempfile.mkdtemp()
    library = os.path.join(directory, "ext.so")
    with open(os.path.join(directory, "ext.cpp"), "w") as out:
        out.write("#include <stdexcept>\n" + SOURCE + "\n")
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-o", library, os.path.join(directory, "ext.cpp")], check=True
    )
    return library


dist.init_process_group("gloo")
extension = ctypes.CDLL(build())
if dist.get_rank() == 1:
    extension.fused_op()  # FAULT
dist.barrier()
