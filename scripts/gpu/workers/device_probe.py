"""What CUDA really shows this rank: device count and cuda:LOCAL_RANK's UUID (one JSON line).

Compared by the acceptance check with the GPU safelaunch's banner named for the rank.
"""

import json
import os

import torch

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
count = torch.cuda.device_count()
record = {
    "rank": int(os.environ.get("RANK", "0")),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "device_count": count,
}
if local_rank < count:
    properties = torch.cuda.get_device_properties(local_rank)
    record["uuid"] = f"GPU-{properties.uuid}"  # NVML's spelling of the same UUID
    record["name"] = properties.name
print("ACCEPTANCE " + json.dumps(record), flush=True)
