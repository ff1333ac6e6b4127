"""A small GPU workload: square matrix products on the device lfm gave this run.

Not run by the tests (it needs a GPU and PyTorch). On a GPU node:

    pip install torch
    lfm run --gpus 1 --gpu-memory 4G --series series.jsonl --report report.json -- \
        python samples/gpu/matmul.py --size 8192 --steps 200
    lfm call samples/gpu/matmul.py:multiply --args '[4096, 50]' --gpus 1 --report report.json

The report's `gpu` object has the device, the process's peak GPU memory (about three
size x size float32 matrices, 768 MiB at 8192) and the device's utilisation (docs/report.md).
`--gpu-memory 512M` with `--size 8192` shows the limit: the run is killed at the first sample
over it, `limits_exceeded: gpu_memory`.
"""

import argparse
import os
import time


def multiply(size=4096, steps=50):
    """`steps` products of two random size x size matrices on the first visible device."""
    import torch  # the sample's one dependency, imported where it runs

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible (CUDA_VISIBLE_DEVICES=%r)"
                           % os.environ.get("CUDA_VISIBLE_DEVICES"))
    device = torch.device("cuda:0")
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    started = time.perf_counter()
    for _ in range(steps):
        c = a @ b
        a, b = b, c / c.norm()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    return {
        "device": torch.cuda.get_device_name(device),
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "tflops": 2 * size**3 * steps / seconds / 1e12,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    print(multiply(args.size, args.steps))


if __name__ == "__main__":
    main()
