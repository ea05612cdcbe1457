"""One suite run judged: the results frame from its runs, derived figures, what is conclusive, history,
the GX suite, causes and the storage checks, as a typed Evaluation the store and the report read."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.history.regression import series_floor
from bench.analysis.verdict import bounds
from bench.analysis.verdict import expectations as names
from bench.analysis.verdict.differential import VARIANTS as DIFFERENTIAL_VARIANTS
from bench.analysis.verdict.interference import settled, share_bound
from bench.config.models import SweepConfig
from bench.results.schema import CHECKPOINT_RATES, REPEAT

# The figures a second run of a scale gives its scale (the better of the two is checked).
RERUN_FIGURES = ("throughput_img_s", *CHECKPOINT_RATES)
CHECKPOINT_REGRESSIONS = {
    names.CHECKPOINT_WRITE_NOT_REGRESSED: "ckpt_write_mb_s",
    names.CHECKPOINT_READ_NOT_REGRESSED: "ckpt_read_mb_s",
}
CHECKPOINT_EFFICIENCIES = (
    names.CHECKPOINT_WRITE_EFFICIENCY_AT_LEAST_BOUND,
    names.CHECKPOINT_READ_EFFICIENCY_AT_LEAST_BOUND,
)


def result_rows(cfg: SweepConfig, suite_run_id: str, runs: list[dict], started_at: str) -> list[dict]:
    from bench.analysis.frame import config_key, row_from_result

    key = config_key(cfg)
    return [
        row_from_result(
            suite_run_id, r["workload"], r["gpus"], r["result"], cfg.where.launcher, cfg.where.cluster, started_at, key
        )
        for r in runs
    ]


def scale_frame(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started_at: str,
    storage_ceiling: float | None = None,
    store=None,
) -> pd.DataFrame:
    """One row per scale (the runs without a variant), cache-labelled, with its node ceiling and its
    efficiency against linear, the ceiling and the suite's ideal (bench.analysis.verdict.ceilings). A
    scale or ceiling re-measured after interference is its re-measure (interference.settled). The
    ceiling is checked against one rank and, with a `store`, its own history before the ideal reads it
    (verdict.ceiling_check)."""
    from bench.analysis.frame import build_frame
    from bench.analysis.verdict.cache import label_cache_served
    from bench.analysis.verdict.ceiling_check import FIGURE, JUDGED, judged_ceilings
    from bench.analysis.verdict.ceilings import with_node_ceilings
    from bench.analysis.verdict.scaling import derive

    runs = settled(runs)
    own = [r for r in runs if not r.get("variant")]
    frame = build_frame(result_rows(cfg, suite_run_id, own, started_at))
    again = {(r["workload"], int(r["gpus"])) for r in own if r["result"].get("remeasured")}
    frame["remeasured"] = [(w, int(g)) in again for w, g in zip(frame["workload"], frame["gpus"], strict=True)]
    frame = label_cache_served(frame, cfg.data.storage_cache_bytes, storage_ceiling)
    frame = with_node_ceilings(frame, runs)
    history = history_for(cfg, frame, store, suite_run_id, FIGURE) if store is not None else None
    frame = judged_ceilings(frame, history, cfg.bounds.regression_tolerance, cfg.resolved_ideal())
    # the smallest scale is the baseline; the checked ceiling is read by derive only
    return derive(frame, None, cfg.resolved_ideal()).drop(columns=["throughput_boot", JUDGED])


def without_ceiling(frame: pd.DataFrame, problems: pd.Series) -> pd.Series:
    """A multi-rank scale judged against its node ceiling when that ceiling was not measured cannot be
    judged: inconclusive, with the ceiling run's own failure where there was one."""
    out = problems.copy()
    for idx, r in frame.iterrows():
        judged_by_ceiling = r.get("ideal") == "independent" and r["gpus"] > 1 and bool(r.get("valid", False))
        if out[idx] or not judged_by_ceiling or pd.notna(r.get("independent_img_s")):
            continue
        out[idx] = "node ceiling not measured" + (f" ({r['ceiling_note']})" if r.get("ceiling_note") else "")
    return out


def rerun_frame(cfg: SweepConfig, suite_run_id: str, reruns: list[dict], started_at: str) -> pd.DataFrame:
    """One row per differential rerun: valid only where it completed and its measurement holds."""
    from bench.analysis.frame import build_frame
    from bench.analysis.verdict.rules import measurement_problems

    if not reruns:
        return pd.DataFrame(columns=["workload", "gpus", "variant", "valid", *RERUN_FIGURES])
    rows = result_rows(cfg, suite_run_id, reruns, started_at)
    # one frame per rerun: build_frame sorts by (workload, gpus), and each scale has two variants
    frame = pd.concat(
        [build_frame([row]).assign(variant=r["variant"]) for row, r in zip(rows, reruns, strict=True)],
        ignore_index=True,
    )
    frame["valid"] = frame["valid"].astype(bool) & measurement_problems(frame, cfg.bounds).eq("")
    return frame[["workload", "gpus", "variant", "valid", *RERUN_FIGURES]]


def history_for(
    cfg: SweepConfig, frame: pd.DataFrame, store, suite_run_id: str, column: str = "throughput_img_s"
) -> pd.DataFrame:
    """Each row's series history of `column` (median, count, spread of its last accepted runs that have
    it), from the newest annotated re-baseline of the series on."""
    from bench.analysis.history.annotations import baseline_since
    from bench.analysis.history.regression import NOISE_HISTORY_RUNS, history_stats

    notes = store.annotations(cfg.where.cluster)
    since = [
        baseline_since(notes, r["cluster"], r["workload"], int(r["gpus"]), r["config_key"])
        for r in frame.to_dict("records")
    ]
    window = cfg.bounds.history_runs
    newest_first = store.history_values(frame, max(window, NOISE_HISTORY_RUNS), suite_run_id, since, column)
    return history_stats([v[::-1] for v in newest_first], frame.index, window)  # oldest first, as the floor reads


def checkpoint_history(cfg: SweepConfig, frame: pd.DataFrame, store, suite_run_id: str) -> dict[str, pd.DataFrame]:
    """Each checkpoint figure this run measured: its series' history (as `history_for`); {} without one."""
    return {
        figure: history_for(cfg, frame, store, suite_run_id, figure)
        for figure in CHECKPOINT_RATES
        if figure in frame and frame[figure].notna().any()
    }


def suspected_regressions(cfg: SweepConfig, frame: pd.DataFrame, store, suite_run_id: str) -> list[tuple[str, int]]:
    """(workload, gpus) of each conclusive scale whose images/s fell under its series' regression floor
    in this run: each is run once more before a regression is called (bench.suite.run.regression_repeats)."""
    from bench.analysis.history.regression import regression_floor
    from bench.analysis.verdict.rules import measurement_problems

    tolerance = cfg.bounds.regression_tolerance
    conclusive = frame["valid"].astype(bool) & measurement_problems(frame, cfg.bounds).eq("")
    histories = {"throughput_img_s": history_for(cfg, frame, store, suite_run_id)}
    histories |= checkpoint_history(cfg, frame, store, suite_run_id)  # a checkpoint MB/s under its floor, too
    under = pd.Series(False, index=frame.index, dtype=bool)
    for figure, history in histories.items():
        floor, _ = regression_floor(history, tolerance)
        fell = [bounds.fails(bounds.REGRESSION, v, f) for v, f in zip(frame[figure], floor, strict=True)]
        under |= pd.Series(fell, index=frame.index, dtype=bool)
    below = conclusive & under
    return [(str(w), int(g)) for w, g in zip(frame.loc[below, "workload"], frame.loc[below, "gpus"], strict=True)]


def repeat_rates(frame: pd.DataFrame, repeats: pd.DataFrame, figure: str = "throughput_img_s") -> pd.Series:
    """Each scale's second run's images/s (or `figure`) where one ran and its measurement holds (NaN elsewhere)."""
    valid = repeats[repeats["valid"].astype(bool)]
    triples = zip(valid["workload"], valid["gpus"], valid[figure], strict=True)
    rate = {(str(w), int(g)): float(t) for w, g, t in triples}
    keys = zip(frame["workload"].astype(str), frame["gpus"].astype(int), strict=True)
    return pd.Series([rate.get(k, float("nan")) for k in keys], index=frame.index, dtype=float)


@dataclass
class Evaluation:
    frame: pd.DataFrame
    passed: bool
    failures: list[dict]
    warnings: list[dict]
    data_docs: str | None
    verdict: str = "PASSED"  # PASSED, FAILED or INCONCLUSIVE
    inconclusive: list[dict] = field(default_factory=list)
    probe: dict | None = None  # the storage probe (probe.json), with "accepted" and "history_median"
    # per emulated workload: accelerators fed at AU, measured and projected (verdict.accelerators)
    accelerators_at_au: dict = field(default_factory=dict)


def evaluate(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started_at: str,
    store=None,
    data_docs_dir: Path | None = None,
    probe: dict | None = None,
) -> Evaluation:
    """Results frame from run results, derived figures, what is conclusive, history, then the GX suite."""
    from bench.analysis.verdict.expectations import validate
    from bench.analysis.verdict.nodes import node_warnings
    from bench.analysis.verdict.rules import suite_verdict

    # `ceiling` is one node's (what one host's epoch 1 is held against); the curve sizes the storage
    ceiling = probe["ceiling_mb_s"] if probe and probe.get("conclusive") else None
    curve = probe if ceiling is not None else None
    prepared = judged_frame(cfg, suite_run_id, runs, started_at, store, ceiling, curve)
    verdict = validate(prepared, cfg.bounds, data_docs_dir)
    reruns = rerun_frame(cfg, suite_run_id, [r for r in runs if r.get("variant") in DIFFERENTIAL_VARIANTS], started_at)
    slow_in_probe = (probe or {}).get("slow_nodes") if probe and probe.get("conclusive") else None
    prepared = with_verdicts(cfg, prepared, verdict.per_row, reruns, ceiling, slow_in_probe)
    failures = failure_items(verdict.failures, prepared)
    inconclusive = inconclusive_rows(prepared)
    warnings = figure_warnings(verdict.warnings, prepared) + node_warnings(prepared, slow_in_probe)
    outcome = suite_verdict(prepared)
    storage_failures, storage_inconclusive, probe = storage_checks(cfg, suite_run_id, prepared, probe, store)
    failures += storage_failures
    inconclusive += storage_inconclusive
    if storage_failures:
        outcome = "FAILED"
    elif storage_inconclusive and outcome == "PASSED":
        outcome = "INCONCLUSIVE"
    from bench.analysis.verdict.accelerators import accelerators_at_au
    from bench.workloads.spec import emulated_workloads

    emulated = emulated_workloads(cfg.training.workloads, cfg.bounds.min_au)
    at_au = accelerators_at_au(prepared, emulated, storage_for(cfg, curve))
    return Evaluation(
        prepared,
        outcome == "PASSED",
        failures,
        warnings,
        verdict.data_docs,
        outcome,
        inconclusive,
        probe,
        at_au,
    )


def judged_frame(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started_at: str,
    store,
    ceiling: float | None,
    curve: dict | None = None,
) -> pd.DataFrame:
    """The scales' frame as the GX suite reads it: expected throughput, what is conclusive and why not,
    storage sizing, history and second runs, and the bound columns (expectations.prepare)."""
    from bench.analysis.verdict.ceilings import add_expected
    from bench.analysis.verdict.demand import storage_idle
    from bench.analysis.verdict.expectations import prepare
    from bench.analysis.verdict.nodes import node_problems
    from bench.analysis.verdict.rules import measurement_problems, with_baseline_problems
    from bench.analysis.verdict.sizing import add_sizing

    repeats = [r for r in runs if r.get("variant") == REPEAT]
    frame = scale_frame(cfg, suite_run_id, runs, started_at, ceiling, store)
    frame = add_expected(frame, cfg.train.batch_size, ceiling, storage_for(cfg, curve))
    frame["storage_idle"] = storage_idle(frame, store_at(cfg, ceiling, curve))
    problems = measurement_problems(frame, cfg.bounds)
    problems = node_problems(frame, without_ceiling(frame, problems))  # a node without figures: not judged
    frame["inconclusive_reason"] = with_baseline_problems(frame, problems)
    frame = add_sizing(frame, *sizing_ceiling(curve), cfg.bounds.min_supported_gpus)
    history = history_for(cfg, frame, store, suite_run_id) if store is not None else None
    ckpt_history = checkpoint_history(cfg, frame, store, suite_run_id) if store is not None else {}
    second = rerun_frame(cfg, suite_run_id, repeats, started_at)
    frame["repeat_img_s"] = repeat_rates(frame, second)
    for figure in CHECKPOINT_RATES:  # the better of the two runs, as for images/s
        first = frame[figure].astype(float)
        frame[figure.replace("_mb_s", "_checked")] = np.fmax(first, repeat_rates(frame, second, figure))
    return prepare(frame, cfg.bounds, history, ckpt_history)


def with_verdicts(
    cfg: SweepConfig,
    prepared: pd.DataFrame,
    per_row: dict[tuple[str, int], list[str]],
    reruns: pd.DataFrame,
    ceiling: float | None,
    probe_slow: list[dict] | None = None,
) -> pd.DataFrame:
    """Each row's verdict from its failed expectations, its cause (confirmed by the differential
    reruns; a node that stands out against its peers, here or in the run's probe `probe_slow`, named
    before the rank rules' cause), and whether history accepts it."""
    from bench.analysis.verdict.bottleneck import add_bottlenecks, without_input_side
    from bench.analysis.verdict.ceilings import cross_check
    from bench.analysis.verdict.differential import add_differential
    from bench.analysis.verdict.nodes import add_slow_nodes
    from bench.analysis.verdict.rules import PASS, row_verdicts

    critical = {k: [n for n in found if n != names.BANDWIDTH_NOT_CACHE_DISTORTED] for k, found in per_row.items()}
    # Whether each row's own figures pass, whatever the storage sizing says: that decides history.
    own = {k: [n for n in found if n != names.STORAGE_FEEDS_PLANNED_GPUS] for k, found in critical.items()}
    own_pass = row_verdicts(prepared, own)["verdict"] == PASS
    prepared = row_verdicts(prepared, critical)
    prepared["passed"] = prepared["verdict"] == PASS
    au_failed = {k for k, found in critical.items() if names.ACCELERATOR_UTILISATION_AT_LEAST in found}
    foreign = share_bound(cfg.bounds)  # the cause rules' interference share is the verdict's
    prepared = cross_check(add_bottlenecks(prepared, cfg.bounds.straggler_gap, ceiling, au_failed, foreign))
    prepared = add_differential(
        prepared,
        reruns,
        bounds.bound_at(bounds.SCALING_EFFICIENCY, cfg.bounds),
        without_input_side(prepared, cfg.bounds.straggler_gap, ceiling, foreign),
    )
    prepared = add_slow_nodes(prepared, probe_slow)
    # The expectations the row failed: a figure's own validity rule (a read too short for a rate, cache-
    # distorted) makes that figure inconclusive (a warning), never a failed expectation of the row.
    prepared["failed_expectations"] = [
        json.dumps(critical[(w, int(g))]) for w, g in zip(prepared["workload"], prepared["gpus"], strict=True)
    ]
    # History learns only from conclusive, passing rows on their own slots: a regression, a short window
    # or a contended (oversubscribed) figure must never become the norm.
    prepared["accepted"] = prepared["valid"].astype(bool) & own_pass & ~prepared["oversubscribed"].astype(bool)
    return prepared


def figure_warnings(warnings: list[dict], prepared: pd.DataFrame) -> list[dict]:
    """The GX warnings with why each figure is inconclusive: for the epoch-1 read rate, the summary's
    own note (cache-distorted, evicted incompletely, or reads too short for a rate)."""
    notes = {(r["workload"], int(r["gpus"])): r.get("bandwidth_note") for _, r in prepared.iterrows()}
    out = []
    for w in warnings:
        note = notes.get((w["workload"], int(w["gpus"])))
        if w["expectation"] == names.BANDWIDTH_NOT_CACHE_DISTORTED and isinstance(note, str) and note:
            w = {**w, "reason": f"epoch-1 read figure inconclusive: {note}"}
        out.append(w)
    return out


def inconclusive_figures(warnings: list[dict]) -> list[dict]:
    """The figures whose own validity rule failed (epoch-1 reads too short for a rate, or served from the
    cache): each an INCONCLUSIVE item {workload, gpus, figure, reason} the alert states as such, its row
    still judged on its other figures (issue 49: too short is INCONCLUSIVE, never FAILED, and never only a
    warning line). `warnings` as figure_warnings gives them (their reasons say why)."""
    return [
        {"workload": w["workload"], "gpus": w["gpus"], "figure": "epoch-1 read rate", "reason": w.get("reason", "")}
        for w in warnings
        if w["expectation"] == names.BANDWIDTH_NOT_CACHE_DISTORTED
    ]


def failure_items(failures: list[dict], prepared: pd.DataFrame) -> list[dict]:
    """The suite's failures as alerts read them: the ideal judged against, why a sizing or regression
    check failed, the named cause and its evidence, and an oversubscription note."""
    from bench.analysis.verdict.rules import oversubscription_note

    by_key = {(r["workload"], int(r["gpus"])): r for _, r in prepared.iterrows()}
    out = []
    for f in failures:
        row = by_key[(f["workload"], int(f["gpus"]))]
        if f["expectation"] == names.SCALING_EFFICIENCY_AT_LEAST_BOUND:
            f = {**f, "metric": f"{f['metric']} (vs {row.get('ideal') or 'linear'})"}
            f |= {"confirmed_runs": int(row.get("confirmed_runs") or 1), "reason": bound_miss_text(row)}
        if f["expectation"] == names.THROUGHPUT_NOT_BELOW_SMALLER_SCALE:
            f = {**f, "reason": slower_than_smaller_text(row)}
        if f["expectation"] == names.STORAGE_FEEDS_PLANNED_GPUS:
            f = {**f, "reason": shortfall_text(row)}
        if f["expectation"] == names.THROUGHPUT_NOT_REGRESSED:
            f = {**f, "reason": regression_text(row)}
        if f["expectation"] in CHECKPOINT_REGRESSIONS:
            f = {**f, "reason": checkpoint_regression_text(row, CHECKPOINT_REGRESSIONS[f["expectation"]])}
        if f["expectation"] in CHECKPOINT_EFFICIENCIES:
            f = {**f, "metric": f"{f['metric']} (vs {row.get('ideal') or 'linear'})"}
        if row.get("bottleneck"):
            f = {**f, "bottleneck": row["bottleneck"], "evidence": row["bottleneck_evidence"]}
        note = oversubscription_note(row)
        out.append({**f, "reason": "; ".join(x for x in (f.get("reason", ""), note) if x)} if note else f)
    return out


def storage_for(cfg: SweepConfig, curve: dict | None):
    """gpus -> (MB/s the storage gives the nodes a scale of that many ranks trains on, what binds it),
    from the probe's aggregate curve and one node's ceiling (bench.storage.fio_probe.storage_at); None without
    a conclusive probe."""
    from bench.storage.fio_probe import nodes_for, storage_at

    if curve is None:
        return None
    hosts = [(h.host, h.slots) for h in cfg.where.hosts]
    per_node = cfg.where.ranks_per_node or cfg.where.gpus_per_node or None
    return lambda gpus: storage_at(curve, nodes_for(cfg.where.launcher, hosts, per_node, int(gpus)))


def store_at(cfg: SweepConfig, ceiling: float | None, curve: dict | None):
    """gpus -> the MB/s the store gives a scale of that many ranks (storage_for's figure; one node's
    ceiling without a curve); None without a conclusive probe."""
    at = storage_for(cfg, curve)
    if at is not None:
        return lambda gpus: at(gpus)[0]
    return (lambda gpus: ceiling) if ceiling is not None else None


def sizing_ceiling(curve: dict | None) -> tuple[float | None, int | None, str | None]:
    """(the storage's figure for sizing, the nodes it was read on, what binds it): the largest aggregate
    the probe measured, 'store' where adding nodes stopped adding reads, 'node' where one slow node set
    the level's pace (a lower bound, as 'client'), else 'client' (a lower bound: the store's limit was
    not reached by the nodes probed). One node's ceiling for a probe without a
    curve (written before it)."""
    if curve is None:
        return None, None, None
    aggregate = curve.get("aggregate") or [{"nodes": 1, "mb_s": curve["ceiling_mb_s"]}]
    top = max(aggregate, key=lambda a: (a["mb_s"], -a["nodes"]))
    return float(top["mb_s"]), int(top["nodes"]), str(curve.get("bound") or "client")


def inconclusive_rows(prepared: pd.DataFrame) -> list[dict]:
    from bench.analysis.verdict.rules import INCONCLUSIVE

    return [
        {"workload": r["workload"], "gpus": int(r["gpus"]), "reason": r["inconclusive_reason"]}
        for _, r in prepared.iterrows()
        if r["verdict"] == INCONCLUSIVE
    ]


def shortfall_text(row) -> str:
    fed, planned = int(row["supported_gpus"]), int(row["min_supported_gpus"])
    return (
        f"storage feeds {fed} GPUs, the cluster plans {planned}: short by {planned - fed} "
        f"(fio ceiling {row['storage_ceiling_mb_s']:.1f} MB/s / {row['per_gpu_read_mb_s']:.2f} MB/s per GPU "
        f"measured at {int(row['gpus'])} GPU(s))"
    )


def bound_miss_text(row) -> str:
    """A scaling bound miss as the alert states it: both runs' efficiencies where a second one ran, and the
    node ceiling check's clause where the ideal is not the ceiling as measured (verdict.ceiling_check)."""
    from bench.analysis.verdict.ceiling_check import check_text

    first, bound = float(row["scaling_efficiency"]), float(row["min_scaling_efficiency"])
    second, again = row.get("repeat_img_s"), row.get("repeat_scaling_efficiency")  # expectations.with_second_run
    if again is not None and pd.notna(again):
        text = (
            f"both runs under the {bound:.2f} bound: {first:.3f} then {again:.3f} "
            f"({float(row['throughput_img_s']):.1f} then {float(second):.1f} images/s)"
        )
    else:
        text = f"{first:.3f} under the {bound:.2f} bound in one run"
        text += " (no second run: confirm_regressions off, or it failed)"
    return "; ".join(t for t in (text, check_text(row)) if t)


def slower_than_smaller_text(row) -> str:
    best = float(row["throughput_vs_smaller_checked"])
    return (
        f"{int(row['gpus'])} ranks ran {best:.0%} of the images/s a smaller scale of {row['workload']} ran "
        "(the better of its runs): more ranks slower than fewer never passes"
    )


def checkpoint_regression_text(row, figure: str) -> str:
    """Why a checkpoint MB/s regression was called: the figure (the better of two runs) under its floor."""
    kind = "write" if "write" in figure else "read"
    return f"checkpoint {kind} {float(row[figure.replace('_mb_s', '_checked')]):.1f} MB/s under its regression floor"


def regression_text(row) -> str:
    """Why a regression was called: both runs' figures against the floor, or why there was no second."""
    first, second = float(row["throughput_img_s"]), row.get("repeat_img_s")
    held = (
        f"floor {row['regression_floor']:.1f}: history median {row['history_median']:.1f} images/s over "
        f"{int(row['history_n'])} runs, tolerance used {row['regression_tolerance_used']:.0%}"
    )
    held += _how_sure(row)
    if second is not None and pd.notna(second):
        return f"both runs under the {held}: {first:.1f} then {float(second):.1f} images/s"
    return f"{first:.1f} images/s under the {held}; no second run to confirm it (confirm_regressions off, or it failed)"


def _how_sure(row) -> str:
    """The noise model's part of a regression's reason (issue 54): the series' spread and the drop's 95%
    interval; or that the series is too short for it and the fixed tolerance judged."""
    cv, low, high = row.get("noise_cv"), row.get("drop_ci_low"), row.get("drop_ci_high")
    if cv is None or pd.isna(cv):
        return " (too few runs for the noise model: the fixed tolerance judged)"
    if low is None or pd.isna(low):
        return f", spread {float(cv):.1%}"
    return f", spread {float(cv):.1%}; drop 95% CI {float(low):.1%} to {float(high):.1%}"


def storage_checks(
    cfg: SweepConfig, suite_run_id: str, frame: pd.DataFrame, probe: dict | None, store
) -> tuple[list[dict], list[dict], dict | None]:
    """The probe's own regression check against earlier probes of the same storage, and what cannot be
    judged when the suite asks for a supported GPU count that no conclusive probe backs."""
    failures: list[dict] = []
    inconclusive: list[dict] = []
    wanted = cfg.bounds.min_supported_gpus
    if probe is None:
        if wanted is not None and cfg.probe.probe_storage and not cfg.train.synthetic:
            inconclusive.append(
                {"workload": "storage", "gpus": "*", "reason": "storage probe did not complete: no sizing"}
            )
        return failures, inconclusive, None
    probe = dict(probe)
    history = (
        store.probe_history(
            cfg.where.cluster, probe["paths"], probe["sample_bytes"], cfg.bounds.history_runs, suite_run_id
        )
        if store
        else []
    )
    judged = series_floor(history[::-1], cfg.bounds.regression_tolerance)  # the store gives newest first
    floor, used = judged["regression_floor"], judged["tolerance_used"]
    probe["history_median"], probe["history_n"] = judged["history_median"], judged["history_n"]
    probe["regression_floor_mb_s"], probe["regression_tolerance_used"] = floor, used
    # The same noise-aware floor as the training figures: a 3-second fio level on a small dataset
    # moves more than 10% run to run, and a fixed tolerance called that noise a regression.
    regressed = bool(probe["conclusive"] and bounds.fails(bounds.REGRESSION, probe["ceiling_mb_s"], floor))
    if regressed:
        failures.append(
            {
                "workload": "storage",
                "gpus": "*",
                "metric": "storage_ceiling_mb_s",
                "expectation": names.STORAGE_CEILING_NOT_REGRESSED,
                "value": round(probe["ceiling_mb_s"], 1),
                "bound": round(floor, 1),
                "reason": (
                    f"fio read ceiling {probe['ceiling_mb_s']:.1f} MB/s vs history median "
                    f"{probe['history_median']:.1f} MB/s over {probe['history_n']} probes "
                    f"(tolerance used {used:.0%})"
                ),
            }
        )
    if not probe["conclusive"] and wanted is not None:
        inconclusive.append({"workload": "storage", "gpus": "*", "reason": f"storage probe: {probe['reason']}"})
    elif wanted is not None:
        for workload in cfg.training.workloads:
            sized = frame[(frame["workload"] == workload) & frame["supported_gpus"].notna()]
            if sized.empty:
                inconclusive.append(
                    {
                        "workload": workload,
                        "gpus": "*",
                        "reason": "no valid, cache-free epoch-1 bandwidth at any scale: per-GPU demand unknown",
                    }
                )
    probe["accepted"] = bool(probe["conclusive"] and not regressed)
    return failures, inconclusive, probe
