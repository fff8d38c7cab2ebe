"""Mixed indentation after an edit: IndentationError."""

import torch.distributed as dist

dist.init_process_group("gloo")
for step in range(3):
    dist.barrier()
      print(step)  # FAULT
