"""Benchmark section 5: the harness in --synthetic mode vs the loop of Horovod's pytorch_synthetic_benchmark.py."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

from runner import (
    KIND,
    ROOT,
    Context,
    describe,
    main_for,
    paired,
    train,
)

NUMBER = 5
TITLE = "peers"


def horovod_style_synthetic(workload: str, batch: int, size: int, seconds: float = 8.0) -> float:
    """The loop of Horovod's pytorch_synthetic_benchmark.py (timeit over batches of one fixed batch)."""
    import timeit

    import torch

    from bench.config.models import TrainConfig
    from bench.loaders.synthetic import SyntheticLoader
    from bench.models.registry import build

    torch.set_num_threads(1)
    torch.manual_seed(0)
    built = build(workload, "tiny", size)
    model = built.model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = SyntheticLoader(
        TrainConfig(workload=workload, synthetic=True, steps=1, batch_size=batch, image_size=size),
        model,
        torch.device("cpu"),
    ).batch

    def step():
        opt.zero_grad()
        built.loss(model, data).backward()
        opt.step()

    timeit.timeit(step, number=3)  # warm-up, as the Horovod script does
    per_step = timeit.timeit(step, number=3) / 3
    batches = max(1, int(seconds / 3 / per_step))
    times = [timeit.timeit(step, number=batches) for _ in range(3)]
    return batch * batches / statistics.mean(times)


def horovod_loop_pinned(workload: str, batch: int, size: int, pin: str) -> float:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks.run import horovod_style_synthetic; "
        f"print(horovod_style_synthetic({workload!r}, {batch}, {size}))"
    )
    done = subprocess.run(
        ["taskset", "-c", pin, sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


def run(ctx: Context) -> None:
    pin = str(max(os.sched_getaffinity(0)))
    long = ["--batch-size", "8", "--image-size", "128", "--steps", "20", "--warmup-steps", "3"]
    long += ["--min-measure-s", "8", "--loader-threads", "1"]
    for w in KIND:
        p = paired(
            lambda w=w: train(["--workload", w, "--synthetic", *long, "--no-sampler"], pin=pin)["images_per_s"],
            lambda w=w: horovod_loop_pinned(w, 8, 128, pin),
        )
        ctx.add(
            "5 peers",
            f"{w}: harness --synthetic / Horovod synthetic-benchmark loop (1 core each)",
            f"{p['ratio']:.3f}",
            describe(p, "target >= 0.95"),
        )
    ctx.add("5 peers", "harness MB/s vs dlio-benchmark", "not run", "dlio-benchmark 2.0.0 needs tensorflow+torchvision")


if __name__ == "__main__":
    sys.exit(main_for(NUMBER))
