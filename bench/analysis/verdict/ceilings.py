"""Expected throughput of a scale from the ceilings measured beside it, and the ideal it is judged by.

The ceilings of one scale, each measured in the same suite run (so the host's drift hits them alike):
- node: `independent_img_s`, the scale's ranks run at once on the same slots as independent
  single-rank copies (no collective): what the nodes' cores, memory bandwidth and sibling threads
  give N ranks;
- network: `allreduce_s`, one step's gradient allreduce (all buckets, the backend's bucketing) over
  the scale's rank layout;
- storage: fio's cold-read ceiling of the staged dataset (`storage_ceiling_mb_s`) over the bytes an
  image needs (`bytes_per_image`).

Model (documented in docs/design.md, "Expected scaling from measured ceilings"):
  step_compute = batch x N / independent_img_s                   (each rank's step, alone but alongside)
  backward     = BACKWARD_SHARE x step_compute                   (the window buckets overlap with)
  exposed      = max(allreduce_s - backward, allreduce_s x LAST_BUCKET_SHARE)
  compute/comm = batch x N / (step_compute + exposed)
  storage      = storage_ceiling_mb_s x 1e6 / bytes_per_image    (epoch 1 only, where it was read)
  expected_img_s = min(compute/comm, storage); bound_by = the smaller one's component.
`expected_efficiency` = expected_img_s / (N x the baseline's per-rank rate); `efficiency_vs_expected`
= measured / expected: near 1 when the ceilings explain the scale, well under 1 when something they
do not measure (a straggler, a foreign process, a contended link) took the rest.

The ideal each verdict is measured against: `linear` (each rank owns an accelerator: GPU slots) or
`independent` (ranks share a node's cores, memory bandwidth and sibling threads: CPU slots); both
efficiencies are always computed, and the bound applies to the ideal's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Ideal = Literal["linear", "independent"]
IDEALS: tuple[str, ...] = ("linear", "independent")
# Backward is about two thirds of a training step's compute (twice the forward's FLOPs); buckets are
# reduced while it runs, so that much of an allreduce can hide behind it.
BACKWARD_SHARE = 2 / 3
# The last bucket is reduced after backward ends whatever the overlap: at least this share is exposed
# (DDP's default 25 MB buckets over a ResNet-50's ~100 MB of gradients: about a quarter).
LAST_BUCKET_SHARE = 0.25
# efficiency_vs_expected at or above this: the ceilings explain the scale (its cause is the binding one).
EXPLAINED = 0.85


@dataclass(frozen=True)
class Expected:
    expected_img_s: float
    expected_efficiency: float
    bound_by: str  # "compute" (the node), "communication", or "storage"
    exposed_comm_s: float
    evidence: str


def default_ideal(gpus_per_node: int) -> Ideal:
    """GPU slots own an accelerator each (linear); CPU slots share the node (independent)."""
    return "linear" if gpus_per_node > 0 else "independent"


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def expected(
    gpus: int,
    batch_size: int,
    baseline_per_rank_img_s: float,
    independent_img_s: float | None,
    allreduce_s: float | None,
    storage_ceiling_mb_s: float | None = None,
    bytes_per_image: float | None = None,
) -> Expected | None:
    """The scale's expected images/s from its ceilings; None where the node ceiling is unknown."""
    if not (_finite(baseline_per_rank_img_s) and gpus >= 1):
        return None
    node = independent_img_s if _finite(independent_img_s) else None
    if node is None:
        return None
    step = batch_size * gpus / node
    exposed = 0.0
    if gpus > 1 and _finite(allreduce_s):
        exposed = max(allreduce_s - BACKWARD_SHARE * step, allreduce_s * LAST_BUCKET_SHARE)
    compute = batch_size * gpus / (step + exposed)
    bound_by = "communication" if exposed > 0.1 * step else "compute"
    evidence = f"node ceiling {node:.1f} images/s for {gpus} rank(s) (independent copies), step {step * 1e3:.1f} ms" + (
        f", allreduce {allreduce_s * 1e3:.1f} ms of which {exposed * 1e3:.1f} ms exposed" if exposed else ""
    )
    best = compute
    if _finite(storage_ceiling_mb_s) and _finite(bytes_per_image):
        storage = storage_ceiling_mb_s * 1e6 / bytes_per_image
        if storage < best:
            best, bound_by = storage, "storage"
            evidence += f"; storage ceiling {storage_ceiling_mb_s:.1f} MB/s feeds {storage:.1f} images/s"
    return Expected(best, best / (gpus * baseline_per_rank_img_s), bound_by, exposed, evidence)


def ideal_efficiency(
    ideal: Ideal, measured_img_s: float, gpus: int, baseline_per_rank_img_s: float, independent_img_s: float | None
) -> float:
    """The efficiency the bound applies to: against linear, or against the independent copies."""
    if ideal == "independent":
        return measured_img_s / independent_img_s if _finite(independent_img_s) else math.nan
    return measured_img_s / (gpus * baseline_per_rank_img_s) if _finite(baseline_per_rank_img_s) else math.nan
