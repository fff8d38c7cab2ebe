import torch.distributed as dist

dist.init_process_group("gloo")
if True
    dist.barrier()  # FAULT (the line above)
