"""A scale's network ceiling: one step's gradient allreduce timed on its own, in the same run.

After the measured steps every rank allreduces buffers as large as the model's gradients, cut into
the buckets its backend sends (`Dist.bucket_bytes`), over the scale's own rank layout and process
group, as nccl-tests' `all_reduce_perf` and SuperBench's nccl-bw measure a fabric: algbw = bytes /
time, busbw = algbw x 2(N-1)/N (the bytes every rank's link carries in a ring or tree allreduce).
The step's time is the slowest rank's (every rank waits for it), the median over a few repetitions;
the latency is a one-element allreduce's. Nothing here hides behind backward: `allreduce_s` is the
whole allreduce, and the expected-throughput model (bench.analysis.verdict.ceilings) decides what
backward hides.

Bucketing follows each backend's defaults, not its exact parameter boundaries: DDP's first bucket
of 1 MiB then 25 MiB buckets, Horovod's 64 MiB fusion buffer (or HOROVOD_FUSION_THRESHOLD).
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from bench.train.dist.base import Dist

# The probe's own time: repetitions stop at this budget (at least one is timed after the warm-up).
BUDGET_S = 5.0
MAX_REPS = 5
LATENCY_REPS = 10


def gradient_bytes(model: torch.nn.Module) -> int:
    """What one step's allreduce carries: every trainable parameter's gradient (the parameter's dtype)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def bucket_sizes(nbytes: int, first_bytes: int, cap_bytes: int) -> list[int]:
    """`nbytes` cut as the backend cuts gradients: a first bucket of `first_bytes`, then `cap_bytes`."""
    sizes, left = [], nbytes
    if left > 0 and first_bytes > 0:
        sizes.append(min(first_bytes, left))
        left -= sizes[0]
    while left > 0:
        sizes.append(min(cap_bytes, left))
        left -= sizes[-1]
    return sizes


def _timed(dist: Dist, buffers: list[torch.Tensor]) -> float:
    """One allreduce of all `buffers` as the slowest rank saw it (started together after a barrier)."""
    dist.barrier()
    if dist.device.type == "cuda":
        torch.cuda.synchronize(dist.device)
    start = time.perf_counter()
    dist.allreduce_buckets(buffers)
    if dist.device.type == "cuda":
        torch.cuda.synchronize(dist.device)
    return dist.agree_max(time.perf_counter() - start)


def probe_allreduce(dist: Dist, nbytes: int) -> dict | None:
    """The scale's allreduce figures (seconds, bytes, buckets, bus GB/s, latency); None on one rank.
    Every rank runs the same repetitions (the count is agreed), so the collectives stay aligned."""
    if dist.size < 2 or nbytes <= 0:
        return None
    first, cap = dist.bucket_bytes()
    sizes = bucket_sizes(nbytes, first, cap)
    buffers = [torch.ones(max(1, s // 4), dtype=torch.float32, device=dist.device) for s in sizes]
    warm = _timed(dist, buffers)  # connections and buffers set up; also sizes the repetitions
    reps = max(1, min(MAX_REPS, int(BUDGET_S / max(warm, 1e-6))))
    seconds = statistics.median(_timed(dist, buffers) for _ in range(reps))
    tiny = [torch.ones(1, dtype=torch.float32, device=dist.device)]
    _timed(dist, tiny)
    latency = statistics.median(_timed(dist, tiny) for _ in range(LATENCY_REPS))
    n = dist.size
    sent = sum(b.numel() * b.element_size() for b in buffers)
    return {
        "seconds": seconds,
        "bytes": sent,
        "buckets": len(buffers),
        "bus_gb_s": sent / seconds * 2 * (n - 1) / n / 1e9 if seconds > 0 else None,
        "latency_s": latency,
        "reps": reps,
    }
