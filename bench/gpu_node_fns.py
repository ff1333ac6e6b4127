"""Functions bench/gpu_node.sh runs on a GPU node (issue 53): a torch call that holds a known
amount of device memory and reports what the driver (NVML) says its own process holds."""

import os
import time


def driver_mib_of_this_process():
    """What NVML reports this process holds, summed over the devices it can see (MiB)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        total = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == os.getpid() and proc.usedGpuMemory:
                    total += proc.usedGpuMemory
        return total / 2**20
    finally:
        pynvml.nvmlShutdown()


def hold(mib, seconds):
    """Fill `mib` MiB on the call's device, keep it `seconds` (several of lfm's 10 ms samples),
    and say what torch and the driver saw."""
    import torch

    block = torch.empty(mib * 2**20, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    time.sleep(seconds)
    return {
        "device": torch.cuda.get_device_name(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "checksum": int(block[:1024].sum().item()),
        "torch_reserved_mib": torch.cuda.memory_reserved() / 2**20,
        "driver_mib": driver_mib_of_this_process(),
    }
