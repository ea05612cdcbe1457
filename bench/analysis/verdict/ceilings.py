"""Expected throughput of a scale from the ceilings measured beside it, and the ideal it is judged by.

The ceilings of one scale, each measured in the same suite run (so the host's drift hits them alike):
- node: `independent_img_s`, the scale's ranks run at once on the same slots as independent
  single-rank copies (no collective), reading the dataset from the page cache: what the nodes'
  cores, memory bandwidth and sibling threads give N ranks, without the store's limit;
- network: `allreduce_s`, one step's gradient allreduce (all buckets, the backend's bucketing) over
  the scale's rank layout, probed after its measured steps (bench.train.dist.allreduce_probe), with its bytes,
  bus bandwidth and latency;
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

import json
import math
from dataclasses import dataclass
from typing import Literal

from bench.analysis.verdict.interference import result_ranks

# The allreduce probe's columns (the ceilings' own: bench.results.schema.CEILING_FLOATS, CEILING_LABELS).
from bench.results.schema import INDEPENDENT, PROBE_FIELDS

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
    storage_binds: str = "",
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
            evidence += f"; storage ceiling {storage_ceiling_mb_s:.1f} MB/s feeds {storage:.1f} images/s" + (
                f" ({storage_binds} bound)" if storage_binds else ""
            )
    return Expected(best, best / (gpus * baseline_per_rank_img_s), bound_by, exposed, evidence)


def ideal_efficiency(
    ideal: Ideal, measured_img_s: float, gpus: int, baseline_per_rank_img_s: float, independent_img_s: float | None
) -> float:
    """The efficiency the bound applies to: against linear, or against the independent copies."""
    if ideal == "independent":
        return measured_img_s / independent_img_s if _finite(independent_img_s) else math.nan
    return measured_img_s / (gpus * baseline_per_rank_img_s) if _finite(baseline_per_rank_img_s) else math.nan


def _completed_rate(result: dict) -> float | None:
    summary = result.get("summary") if result.get("state") == "COMPLETED" else None
    rate = summary.get("images_per_s") if isinstance(summary, dict) else None
    return float(rate) if _finite(rate) else None


def with_node_ceilings(frame, runs: list[dict]):
    """`independent_img_s` per scale from its independent-copies run (a 1-rank scale is its own
    ceiling), the allreduce probe's figures from each scale's summary, and `ceiling_note` where a
    ceiling failed or may carry the store's limit."""
    import numpy as np

    f = frame.copy()
    ceilings = {(r["workload"], int(r["gpus"])): r["result"] for r in runs if r.get("variant") == INDEPENDENT}
    own = {(r["workload"], int(r["gpus"])): r["result"] for r in runs if not r.get("variant")}
    values, notes, foreign = [], [], []
    allreduce: dict[str, list] = {c: [] for c in PROBE_FIELDS}
    for row in f.to_dict("records"):
        key = (row["workload"], int(row["gpus"]))
        probe = ((own.get(key) or {}).get("summary") or {}).get("allreduce") or {}
        for column, field in PROBE_FIELDS.items():
            allreduce[column].append(float(probe[field]) if _finite(probe.get(field)) else np.nan)
        # the ceiling run's ranks, each with its foreign share: an ideal measured under interference
        foreign.append(json.dumps(result_ranks(ceilings[key])) if key[1] > 1 and key in ceilings else "[]")
        if key[1] == 1:
            values.append(row.get("throughput_img_s", np.nan))
            notes.append("")
        elif key in ceilings:
            rate = _completed_rate(ceilings[key])
            values.append(rate if rate is not None else np.nan)
            res = ceilings[key]
            notes.append(
                _cache_note(res)
                if rate is not None
                else f"node ceiling run {res.get('state')}: {res.get('reason', '')}"
            )
        else:
            values.append(np.nan)
            notes.append("")
    f["independent_img_s"] = values
    for column, figures in allreduce.items():
        f[column] = figures
    f["ceiling_note"] = notes
    f["ceiling_foreign_ranks"] = foreign
    return with_interference(f)


def _cache_note(result: dict) -> str:
    """Where the node ceiling's copies could not read the dataset from the page cache (larger than the
    nodes' memory, or not permitted), they read the store too: the ceiling may carry its limit."""
    summary = result.get("summary") or {}
    warmed = (summary.get("storage") or {}).get("drop_caches")
    if summary.get("synthetic") or warmed in (None, "warmed"):
        return ""
    return f"node ceiling read the store as well (page-cache warm-up {str(warmed).replace('_', ' ')})"


def with_interference(frame):
    """The largest share of a rank's slot cores that foreign processes used while it trained, and who."""
    import numpy as np

    f = frame.copy()
    shares, tops = [], []
    for raw in f.get("rank_breakdown", [None] * len(f)):
        try:
            ranks = json.loads(raw or "[]")
        except (TypeError, ValueError):
            ranks = []
        seen = [r for r in ranks if _finite(r.get("foreign_cpu_share")) or r.get("foreign_cpu_share") == 0]
        worst = max(seen, key=lambda r: r["foreign_cpu_share"], default=None)
        shares.append(float(worst["foreign_cpu_share"]) if worst else np.nan)
        tops.append(
            f"rank {worst['rank']} on {worst['host']}: {worst.get('foreign_top') or 'unnamed'}"
            if worst and worst["foreign_cpu_share"] > 0
            else ""
        )
    f["foreign_cpu_share"] = shares
    f["foreign_top"] = tops
    return f


def add_expected(frame, batch_size: int, storage_ceiling_mb_s: float | None, storage_for=None):
    """expected_img_s, expected_efficiency, efficiency_vs_expected and expected_bound_by per row.

    `storage_for`: gpus -> (MB/s, 'client' or 'store'), what the storage gives the nodes a scale trains
    on (the probe's aggregate curve with one node's ceiling: bench.storage.fio_probe.storage_at); without it
    every scale gets `storage_ceiling_mb_s`."""
    import numpy as np

    f = frame.copy()
    cols = {c: [] for c in ("expected_img_s", "expected_efficiency", "efficiency_vs_expected", "expected_bound_by")}
    for row in f.to_dict("records"):
        base = f[(f["workload"] == row["workload"]) & (f["gpus"] == row.get("baseline_gpus"))]
        per_rank = float(base["throughput_img_s"].iloc[0]) / float(base["gpus"].iloc[0]) if not base.empty else np.nan
        read = row.get("avg_read_mb_s")
        per_image = (
            read * 1e6 / row["throughput_img_s"]
            if row.get("bandwidth_valid") is True and _finite(read) and _finite(row.get("throughput_img_s"))
            else None
        )
        storage, binds = storage_for(int(row["gpus"])) if storage_for else (storage_ceiling_mb_s, "")
        e = expected(
            int(row["gpus"]),
            batch_size,
            per_rank,
            row.get("independent_img_s"),
            row.get("allreduce_s"),
            storage,
            per_image,
            binds,
        )
        measured = row.get("throughput_img_s")
        cols["expected_img_s"].append(e.expected_img_s if e else np.nan)
        cols["expected_efficiency"].append(e.expected_efficiency if e else np.nan)
        cols["efficiency_vs_expected"].append(measured / e.expected_img_s if e and _finite(measured) else np.nan)
        cols["expected_bound_by"].append(e.bound_by if e else "")
    for name, values in cols.items():
        f[name] = values
    return f


# The rules' causes each binding component accounts for (the node ceiling is the cores' contention).
AGREES = {
    "compute": ("contention",),
    "communication": ("communication", "straggler"),
    "storage": ("storage", "input_cpu"),
}


def cross_check(frame):
    """Each named cause beside what the ceilings say: which component binds, measured against expected,
    and, where the ceilings explain the scale but name another component than the rules, that they
    disagree (the row says so; the rules' cause stands, the differential reruns decide it)."""
    f = frame.copy()
    if "bottleneck" not in f:
        return f
    texts = []
    for row in f.to_dict("records"):
        evidence = row.get("bottleneck_evidence") or ""
        cause, bound_by, ratio = (
            row.get("bottleneck") or "",
            row.get("expected_bound_by") or "",
            row.get("efficiency_vs_expected"),
        )
        if cause and bound_by and _finite(ratio):
            note = (
                f"ceilings: {bound_by} binds (expected {row['expected_img_s']:.1f} images/s, "
                f"measured {ratio:.0%} of it)"
            )
            if ratio >= EXPLAINED and cause not in AGREES.get(bound_by, ()) and cause != "interference":
                note += f"; the ceilings and the rules disagree ({bound_by} vs {cause})"
            elif ratio < EXPLAINED:
                note += "; the ceilings do not explain the drop"
            evidence = f"{evidence}; {note}" if evidence else note
        texts.append(evidence)
    f["bottleneck_evidence"] = texts
    return f
