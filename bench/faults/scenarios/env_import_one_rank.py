"""Only rank 1 imports an optional dependency (e.g. a logger only some ranks use)."""

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    import wandb_not_installed  # noqa: F401  # FAULT
dist.barrier()
dist.destroy_process_group()
