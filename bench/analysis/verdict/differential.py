"""Differential confirmation of a failing scale's cause, as DS-Analyzer does (Mohan et al., VLDB 2021).

The step-time rules (bench.analysis.verdict.bottleneck) read one run; a rule can be fooled where two causes
look alike (a storage stall and a starved decoder both show as data wait). So a scale below its
scaling bound, and its baseline, are run twice more: with the dataset in the page cache (storage out)
and with synthetic in-memory data (storage, decode and augmentation out). At the failing scale,
DS-Analyzer's stalls are fetch stall = 1 - cold/warm and prep stall = 1 - warm/synthetic (shares of
the images/s that each removes). Across scales, each variant's own scaling efficiency (its images/s
at the failing scale over linear from its own baseline) says which rerun removes the drop; a scale
judged against its node ceiling is compared on that basis too (its linear efficiency, and the bound
times the ceiling's share of linear):

- warm recovers at least RECOVERY of the shortfall below the bound: storage;
- else synthetic does: the input pipeline's CPU (decode, augmentation);
- else neither: not input-side, so communication, a straggler or contention decide.

The rule's cause is then confirmed, or corrected with both figures in the evidence. A straggler whose
drop goes with a warm cache stays a straggler (its host is the actionable part), with that noted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# The figures and labels the reruns add (rerun_removed: warm, synthetic, neither; "" where not rerun).
from bench.results.schema import DIFFERENTIAL_FIGURES as FIGURES
from bench.results.schema import DIFFERENTIAL_LABELS as LABELS
from bench.results.schema import SYNTHETIC, WARM

VARIANTS = (WARM, SYNTHETIC)
RECOVERY = 0.5  # share of the shortfall below the bound a rerun must win back to "remove the drop"
IMPLIED = {"warm": "storage", "synthetic": "input_cpu"}


def scales_to_confirm(frame: pd.DataFrame, bound_at) -> list[tuple[str, int, int]]:
    """(workload, gpus, baseline gpus) of each measured scale below its bound (`bound_at(gpus)`).

    Oversubscribed scales are contended by design (no rerun can say more) and a baseline has no
    efficiency of its own. The comparison is bench.analysis.verdict.bounds' (at the bound passes)."""
    from bench.analysis.verdict import bounds

    out = []
    for _, r in frame.iterrows():
        eff = r.get("scaling_efficiency")
        if r.get("state") != "COMPLETED" or not bool(r.get("valid")) or eff is None or pd.isna(eff):
            continue
        gpus, base = int(r["gpus"]), int(r["baseline_gpus"])
        if gpus == base or bool(r.get("oversubscribed")):
            continue
        if bounds.fails(bounds.SCALING_EFFICIENCY, float(eff), bound_at(gpus)):
            out.append((str(r["workload"]), gpus, base))
    return out


def rerun_plan(frame: pd.DataFrame, bound_at) -> list[dict]:
    """Each variant of each failing scale and of its baseline, once, baseline first: the runs to launch."""
    items: list[dict] = []
    for workload, gpus, base in scales_to_confirm(frame, bound_at):
        for variant in VARIANTS:
            for n in (base, gpus):
                item = {"workload": workload, "gpus": n, "variant": variant}
                if item not in items:
                    items.append(item)
    return items


def _rate(variants: pd.DataFrame, workload: str, gpus: int, variant: str) -> float | None:
    hit = variants[(variants["workload"] == workload) & (variants["gpus"] == gpus) & (variants["variant"] == variant)]
    if hit.empty or not bool(hit["valid"].iloc[0]):
        return None
    value = float(hit["throughput_img_s"].iloc[0])
    return value if np.isfinite(value) and value > 0 else None


# An image model reading a bucket (bench.suite.plan.images_over_s3) gets no reruns: say why its cause stands
# unconfirmed rather than leave the column empty as for a scale nobody asked to confirm.
NOT_SEPARABLE = (
    "not confirmed: over S3 no rerun takes the store out and keeps the JPEG decode (no page cache holds an "
    "object), so storage and decode are not told apart by reruns"
)


def _decode_behind_a_store(row) -> bool:
    """The row's images were read by GETs (bytes_source s3) by a real model (not emulated)."""
    emulated = row.get("emulated")
    return row.get("bytes_source") == "s3" and not (isinstance(emulated, bool | np.bool_) and bool(emulated))


def removed_by(cold: float, warm: float, synthetic: float, bound: float) -> str:
    """Which rerun wins back at least RECOVERY of the shortfall (scaling efficiencies; warm is tried first)."""
    shortfall = max(bound - cold, 1e-9)
    if warm - cold >= RECOVERY * shortfall:
        return "warm"
    if synthetic - cold >= RECOVERY * shortfall:
        return "synthetic"
    return "neither"


def add_differential(frame: pd.DataFrame, variants: pd.DataFrame, bound_at, rediagnose) -> pd.DataFrame:
    """FIGURES and LABELS on each rerun scale; `bottleneck` and its evidence confirmed or corrected.

    `variants`: one row per rerun (workload, gpus, variant, valid, throughput_img_s). `rediagnose(row)`
    names the cause with the input-side rules left out, for a drop that neither rerun removes."""
    f = frame.copy()
    for c in FIGURES:
        f[c] = np.nan
    for c in LABELS:
        f[c] = ""
    for idx, row in f.iterrows():
        named = isinstance(row.get("bottleneck"), str) and row.get("bottleneck")  # a cause named (not NaN)
        if int(row["gpus"]) != int(row["baseline_gpus"]) and named and _decode_behind_a_store(row):
            f.at[idx, "cause_check"] = NOT_SEPARABLE
    if variants.empty:
        return f
    for idx, row in f.iterrows():
        workload, gpus, base = str(row["workload"]), int(row["gpus"]), int(row["baseline_gpus"])
        mine = variants[(variants["workload"] == workload) & (variants["gpus"] == gpus)]
        if mine.empty or gpus == base:
            continue
        rates = {v: (_rate(variants, workload, base, v), _rate(variants, workload, gpus, v)) for v in VARIANTS}
        missing = [f"{v} at {n}" for v in VARIANTS for n, r in zip((base, gpus), rates[v], strict=True) if r is None]
        if missing:
            f.at[idx, "cause_check"] = "not confirmed: rerun failed or inconclusive (" + ", ".join(missing) + ")"
            continue
        eff = {v: rates[v][1] / (rates[v][0] * gpus / base) for v in VARIANTS}
        cold_rate = float(row["throughput_img_s"])
        cold, bound, basis = _on_linear_basis(row, bound_at(gpus))
        fetch = max(0.0, 1.0 - cold_rate / rates["warm"][1])
        prep = max(0.0, 1.0 - rates["warm"][1] / rates["synthetic"][1])
        removed = removed_by(cold, eff["warm"], eff["synthetic"], bound)
        f.loc[idx, list(FIGURES)] = [eff["warm"], eff["synthetic"], fetch, prep]
        f.at[idx, "rerun_removed"] = removed
        rule, evidence = str(row.get("bottleneck") or ""), str(row.get("bottleneck_evidence") or "")
        if not rule:  # inconclusive (or passed after all): figures only, no cause to confirm
            continue
        cause, check, why = _decide(rule, removed, row, rediagnose)
        reruns = (
            f"reruns: efficiency {cold:.2f} cold, {eff['warm']:.2f} warm cache, {eff['synthetic']:.2f} synthetic "
            f"({removed} removes the drop{basis}); fetch stall {fetch:.0%}, prep stall {prep:.0%} at {gpus}"
        )
        if cause != rule:
            evidence = f"{check}; {why}" if why else check
        f.at[idx, "bottleneck"], f.at[idx, "cause_check"] = cause, check
        f.at[idx, "bottleneck_evidence"] = "; ".join(x for x in (evidence, reruns) if x)
    return f


def _on_linear_basis(row: pd.Series, bound: float) -> tuple[float, float, str]:
    """(cold efficiency, bound, note) against linear, the basis the reruns' own efficiencies have.

    A scale judged against its node ceiling (the independent ideal) has its bound there: measured >=
    bound x ceiling, i.e. bound x (ceiling / linear) against linear. Comparing a ceiling-based
    efficiency with linear-based reruns mixed two denominators."""
    cold = float(row["scaling_efficiency"])
    linear = row.get("linear_efficiency")
    if row.get("ideal") != "independent" or linear is None or not np.isfinite(linear) or cold <= 0:
        return cold, bound, ""
    factor = float(linear) / cold  # the node ceiling over N x one rank
    return float(linear), bound * factor, f"; against linear, the bound {bound * factor:.2f} there"


def _decide(rule: str, removed: str, row: pd.Series, rediagnose) -> tuple[str, str, str]:
    """(cause, check, evidence of a corrected cause)."""
    implied = IMPLIED.get(removed)
    if implied:
        if rule == implied:
            return rule, "confirmed", ""
        if rule == "straggler":
            return rule, f"kept: the straggler's drop goes with the {removed} rerun (its input path)", ""
        return implied, f"corrected from {rule}: the {removed} rerun removes the drop", _input_figures(row)
    if rule in IMPLIED.values():
        cause, why = rediagnose(row)
        return cause, f"corrected from {rule}: neither rerun removes the drop", why
    if rule == "undetermined":
        return rule, "not input-side: neither rerun removes the drop", ""
    return rule, "confirmed", ""


def _input_figures(row: pd.Series) -> str:
    """The input side's own figures, for a cause the reruns named where the rules did not."""
    parts = []
    if pd.notna(row.get("data_wait_share")):
        parts.append(f"data wait {float(row['data_wait_share']):.0%} of step time")
    if pd.notna(row.get("avg_read_mb_s")):
        read = f"storage read {float(row['avg_read_mb_s']):.1f} MB/s"
        if pd.notna(row.get("storage_ceiling_mb_s")):
            read += f" (fio ceiling {float(row['storage_ceiling_mb_s']):.1f} MB/s)"
        parts.append(read)
    return "; ".join(parts)
