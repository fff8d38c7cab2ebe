"""Both ranks recv first: a point-to-point deadlock (pipeline schedule bug)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
buf = torch.zeros(4)
dist.recv(buf, src=1 - rank)  # FAULT: each waits for the other to send first
dist.send(buf, dst=1 - rank)
