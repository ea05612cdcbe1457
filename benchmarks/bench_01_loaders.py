"""Benchmark section 1: DALI pipeline vs torch DataLoader images/s on the same files and threads."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from runner import (
    KIND,
    Context,
    main_for,
    median,
)

NUMBER = 1
TITLE = "loaders"


def loader_rate(workload: str, kind: str, data: Path, threads: int, batch: int, size: int) -> float:
    import torch

    from bench.config.models import TrainConfig
    from bench.loaders.base import Shard
    from bench.loaders.registry import build_loader
    from bench.models.registry import build

    model = build(workload, "tiny", size).model
    cfg = TrainConfig(
        workload=workload, data=data, steps=1, batch_size=batch, image_size=size, loader=kind, loader_threads=threads
    )
    loader = build_loader(cfg, model, Shard(0, 1), torch.device("cpu"))
    next(iter(loader.epoch()))  # pipeline / worker start-up is not throughput
    start, n = time.perf_counter(), 0
    for _ in range(2):
        for batch_ in loader.epoch():
            n += batch_["images"].shape[0]
    rate = n / (time.perf_counter() - start)
    loader.close()
    return rate


def run(ctx: Context) -> None:
    for w in KIND:
        dali = median(lambda w=w: loader_rate(w, "dali", ctx.data[w], 2, 8, 128), ctx.repeats)
        torch_ = median(lambda w=w: loader_rate(w, "torch", ctx.data[w], 2, 8, 128), ctx.repeats)
        ctx.add(
            "1 loaders",
            f"{w}: DALI / torch DataLoader images/s (2 threads)",
            f"{dali / torch_:.2f}",
            f"({dali:.0f} vs {torch_:.0f} img/s)",
        )


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
