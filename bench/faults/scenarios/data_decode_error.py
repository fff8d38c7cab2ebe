"""A text dataset with a latin-1 record read as UTF-8."""

import os
import tempfile

import torch.distributed as dist

dist.init_process_group("gloo")
path = os.path.join(tempfile.mkdtemp(), "corpus.txt")
with open(path, "wb") as out:
    out.write("caf\u00e9 au lait\n".encode("latin-1"))
with open(path, encoding="utf-8") as corpus:
    lines = corpus.readlines()  # FAULT
