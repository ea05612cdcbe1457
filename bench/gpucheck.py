"""What scripts/gpu-check.sh computes from its runs, importable without scipy or PyYAML (a CUDA torch
image has neither): the interleaved pairs' ratio with its 95% interval, and the accelerator profile
file the emulated workloads will read (docs/schemas.md, "Accelerator profile").
"""

from __future__ import annotations

import json
import math
import statistics

# Student's t, two-sided 95% (0.975 quantile), by degrees of freedom; 1.96 past the table.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131)
T975 += (2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
PROFILE_VERSION = 1


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return T975[df - 1] if df <= len(T975) else 1.96


def pair_ratio(ratios: list[float]) -> dict:
    """The pairs' ratio (harness / plain loop) and its 95% interval: the geometric mean of the per-pair
    ratios with a t-interval on their mean log, as benchmarks/runner.paired computes it (1.1 and 1/1.1
    weigh the same; each pair's ratio cancels the machine's slow drift). One pair has no interval."""
    if not ratios or any(r <= 0 for r in ratios):
        raise ValueError(f"pair ratios must be positive and at least one, got {ratios}")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"ratio": math.exp(mean), "ci_low": None, "ci_high": None, "n": 1}
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {"ratio": math.exp(mean), "ci_low": math.exp(mean - half), "ci_high": math.exp(mean + half), "n": len(logs)}


def _scalar(value) -> str:
    """A YAML scalar: JSON's quoting of strings and its null are YAML too."""
    if isinstance(value, float):
        return repr(round(value, 6))
    return json.dumps(value)


def accelerator_profile(header: dict, entries: list[dict]) -> str:
    """The profile's YAML text: `header` (accelerator, source, measured_at, ...) then `workloads`, one
    mapping per workload and precision. Entries are {workload, precision, **figures}."""
    lines = [
        "# Accelerator profile: seconds per batch of each workload on one accelerator, measured by",
        "# scripts/gpu-check.sh. Format: docs/schemas.md (Accelerator profile).",
        f"version: {PROFILE_VERSION}",
        *(f"{key}: {_scalar(value)}" for key, value in header.items()),
        "workloads:" if entries else "workloads: {}",
    ]
    for workload in dict.fromkeys(e["workload"] for e in entries):
        lines.append(f"  {workload}:")
        for entry in (e for e in entries if e["workload"] == workload):
            lines.append(f"    {entry['precision']}:")
            lines += [f"      {k}: {_scalar(v)}" for k, v in entry.items() if k not in ("workload", "precision")]
    return "\n".join(lines) + "\n"
