"""The tuned training step written plainly in torch, with no harness: the yardstick for `bench train`.

Same model and loss (bench.models), same batch, channels_last activations and weights, bf16 autocast
(fp16 with a GradScaler on CUDA, as the harness's fp16 step), cudnn.benchmark and a fused SGD on CUDA
(foreach on CPU), a fixed batch on the device: what NVIDIA's reference scripts run. No loader, sampler,
step timer, allreduce or summary. It prints one JSON line with images/s, so it runs as its own process
(pinned like a rank) beside `bench train --synthetic`.

Usage: python benchmarks/tuned_reference.py --workload ssd --preset tiny --batch-size 8 --image-size 128
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def reference_rate(
    workload: str, preset: str, batch_size: int, image_size: int, seconds: float, warmup: int, precision: str
) -> float:
    from bench.models.registry import build

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.backends.cudnn.benchmark = True
    elif precision == "bf16":
        os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # as bench.train.precision
    torch.manual_seed(0)
    built = build(workload, preset, image_size)
    model = built.model.to(device).to(memory_format=torch.channels_last)
    kind = {"fused": True} if cuda else {"foreach": True}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **kind)
    g = torch.Generator().manual_seed(0)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=g)
    batch = {"images": images.contiguous(memory_format=torch.channels_last)}
    if workload == "ssd":
        anchors = model.anchors.shape[0]
        batch["boxes"] = torch.randn(batch_size, anchors, 4, generator=g) * 0.1
        labels = torch.zeros(batch_size, anchors, dtype=torch.int64)
        labels[:, :: max(1, anchors // 8)] = 1
        batch["labels"] = labels
    else:
        batch["masks"] = torch.randint(0, model.num_classes, (batch_size, image_size, image_size), generator=g)
    batch = {k: v.to(device) for k, v in batch.items()}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    model.train()

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=precision != "fp32"):
            loss = built.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            optimizer.step()
            return
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    steps, start = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        if steps % 5 == 0:
            sync()
            if time.perf_counter() - start >= seconds:
                break
    return batch_size * steps / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="ssd", choices=("ssd", "deeplabv3plus"))
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16", "fp16"))
    args = p.parse_args()
    if args.precision == "fp16" and not torch.cuda.is_available():
        p.error("--precision fp16 needs a CUDA GPU (its GradScaler is CUDA's), as bench train's does")
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)  # as a rank does: one thread per core of its slot
    rate = reference_rate(
        args.workload, args.preset, args.batch_size, args.image_size, args.seconds, args.warmup, args.precision
    )
    print(json.dumps({"workload": args.workload, "images_per_s": rate}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
