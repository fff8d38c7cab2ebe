"""Too many open files (a low `ulimit -n` on the cluster) while opening shards."""

import os
import resource
import tempfile

import torch.distributed as dist

dist.init_process_group("gloo")
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
directory = tempfile.mkdtemp()
shards = []
for index in range(200):
    shards.append(open(os.path.join(directory, f"shard{index}"), "w"))  # FAULT  # noqa: SIM115
