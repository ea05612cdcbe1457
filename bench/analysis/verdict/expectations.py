"""Great Expectations (GX Core 1.x) suites over the results frame, built in code.

The custom expectation classes are defined and imported here, in the same module that builds the
suite: GX silently drops an expectation whose class is not imported when a saved suite is loaded,
so suites are never loaded from disk.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.verdict import bounds
from bench.config.models import Thresholds

logging.getLogger("great_expectations").setLevel(logging.WARNING)


# The expectations' names, owned here: results, alerts and the verdict refer to them by these constants.
RUNS_TO_COMPLETE = "ExpectRunsToComplete"
SCALING_EFFICIENCY_AT_LEAST_BOUND = "ExpectScalingEfficiencyAtLeastBound"
BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND = "ExpectBandwidthEfficiencyAtLeastBound"
BANDWIDTH_NOT_CACHE_DISTORTED = "ExpectBandwidthNotCacheDistorted"
GPU_UTILISATION_AT_LEAST_FLOOR = "ExpectGpuUtilisationAtLeastFloor"
MEASURED_THROUGHPUT_POSITIVE = "ExpectMeasuredThroughputPositive"
ACCELERATOR_UTILISATION_AT_LEAST = "ExpectAcceleratorUtilisationAtLeast"
STORAGE_FEEDS_PLANNED_GPUS = "ExpectStorageFeedsPlannedGpus"
THROUGHPUT_NOT_REGRESSED = "ExpectThroughputNotRegressed"
NO_FOREIGN_WORK_ON_SLOTS = "ExpectNoForeignWorkOnSlots"
THROUGHPUT_NOT_BELOW_SMALLER_SCALE = "ExpectThroughputNotBelowSmallerScale"
CHECKPOINT_PHASE_COMPLETED = "ExpectCheckpointPhaseCompleted"
CHECKPOINT_WRITE_EFFICIENCY_AT_LEAST_BOUND = "ExpectCheckpointWriteEfficiencyAtLeastBound"
CHECKPOINT_READ_EFFICIENCY_AT_LEAST_BOUND = "ExpectCheckpointReadEfficiencyAtLeastBound"
CHECKPOINT_WRITE_NOT_REGRESSED = "ExpectCheckpointWriteNotRegressed"
CHECKPOINT_READ_NOT_REGRESSED = "ExpectCheckpointReadNotRegressed"
# The checkpoint expectations (judged only where the phase ran): alerts and the report name them.
CHECKPOINT_EXPECTATIONS = (
    CHECKPOINT_PHASE_COMPLETED,
    CHECKPOINT_WRITE_EFFICIENCY_AT_LEAST_BOUND,
    CHECKPOINT_READ_EFFICIENCY_AT_LEAST_BOUND,
    CHECKPOINT_WRITE_NOT_REGRESSED,
    CHECKPOINT_READ_NOT_REGRESSED,
)
# Judged outside GX (from the probe's own history, not the results frame), named alike in failures.
STORAGE_CEILING_NOT_REGRESSED = "ExpectStorageCeilingNotRegressed"


def _gx():
    import great_expectations as gx

    return gx


def _classes():
    """Named subclasses of built-ins: the names say what is checked, in results and Data Docs."""
    gx = _gx()
    E = gx.expectations

    class ExpectRunsToComplete(E.ExpectColumnValuesToBeInSet):
        """Every (workload, GPUs) run finished COMPLETED with a valid summary."""

    class ExpectScalingEfficiencyAtLeastBound(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """scaling_efficiency >= min_scaling_efficiency per scale."""

    class ExpectBandwidthEfficiencyAtLeastBound(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """Storage bandwidth scales linearly; only rows whose 1st-epoch figure is cache-free."""

    class ExpectBandwidthNotCacheDistorted(E.ExpectColumnValuesToBeInSet):
        """Rows whose bandwidth figure the page cache distorted: reported, never silently passed."""

    class ExpectGpuUtilisationAtLeastFloor(E.ExpectColumnValuesToBeBetween):
        """Average GPU utilisation floor (rows without a GPU report null and are not judged)."""

    class ExpectMeasuredThroughputPositive(E.ExpectColumnValuesToBeBetween):
        """Every completed run measured a positive images/s: zero measured steps is never a valid run."""

    class ExpectAcceleratorUtilisationAtLeast(E.ExpectColumnValuesToBeBetween):
        """AU (compute time / wall time per rank, MLPerf Storage's definition) at or above min_au."""

    class ExpectStorageFeedsPlannedGpus(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """GPUs the storage can feed (fio ceiling / largest measured per-GPU demand) >= the planned size."""

    class ExpectNoForeignWorkOnSlots(E.ExpectColumnValuesToBeBetween):
        """Processes that are not the run's used no more than MAX_FOREIGN_SHARE of any rank's slot cores."""

    class ExpectThroughputNotBelowSmallerScale(E.ExpectColumnValuesToBeBetween):
        """A scale's images/s (the better of two runs) at least a smaller scale's of the workload: more ranks
        slower than fewer never passes, whatever ideal the scaling efficiency is judged against."""

    class ExpectThroughputNotRegressed(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """throughput >= (1 - tolerance) x median of the last K accepted runs (same workload, GPUs, cluster)."""

    class ExpectCheckpointPhaseCompleted(E.ExpectColumnValuesToBeInSet):
        """The checkpoint phase after a scale's training completed on every rank (scales without one: not judged)."""

    class ExpectCheckpointWriteEfficiencyAtLeastBound(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """Checkpoint write MB/s per GPU vs the baseline's >= min_checkpoint_efficiency (read bandwidth's ideal)."""

    class ExpectCheckpointReadEfficiencyAtLeastBound(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """Cold checkpoint read MB/s per GPU vs the baseline's >= min_checkpoint_efficiency."""

    class ExpectCheckpointWriteNotRegressed(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """Checkpoint write MB/s >= its series' regression floor (the better of two runs where one was repeated)."""

    class ExpectCheckpointReadNotRegressed(E.ExpectColumnPairValuesAToBeGreaterThanB):
        """Cold checkpoint read MB/s >= its series' regression floor (the better of two runs)."""

    return {
        c.__name__: c
        for c in (
            ExpectCheckpointPhaseCompleted,
            ExpectCheckpointWriteEfficiencyAtLeastBound,
            ExpectCheckpointReadEfficiencyAtLeastBound,
            ExpectCheckpointWriteNotRegressed,
            ExpectCheckpointReadNotRegressed,
            ExpectRunsToComplete,
            ExpectScalingEfficiencyAtLeastBound,
            ExpectBandwidthEfficiencyAtLeastBound,
            ExpectBandwidthNotCacheDistorted,
            ExpectGpuUtilisationAtLeastFloor,
            ExpectMeasuredThroughputPositive,
            ExpectStorageFeedsPlannedGpus,
            ExpectAcceleratorUtilisationAtLeast,
            ExpectThroughputNotRegressed,
            ExpectNoForeignWorkOnSlots,
            ExpectThroughputNotBelowSmallerScale,
        )
    }


_CLASSES: dict | None = None


def classes() -> dict:
    global _CLASSES  # GX registers classes by name once per process; build them once
    if _CLASSES is None:
        _CLASSES = _classes()
    return _CLASSES


@dataclass(frozen=True)
class Check:
    """One expectation plus how its failures read in alerts: metric, value column, bound column."""

    name: str
    metric: str
    value: str
    bound: str | None
    severity: str  # "critical" fails the suite run; "warning" is reported as inconclusive
    kwargs: dict = field(default_factory=dict)
    limit: str | None = None  # the bench.analysis.verdict.bounds name the figure is held to (None: no threshold)


@dataclass(frozen=True)
class _Judged:
    """One row of CHECKS: an expectation over `column`, held to bounds.`limit` (a per-row bound column for
    a pair check, the threshold itself for a column check); `when` says when the suite includes it."""

    name: str
    metric: str
    value: str
    column: str
    limit: str | None = None
    bound_column: str | None = None
    severity: str = "critical"
    # "always", "set" (its threshold is set), "history" (a regression floor exists), "checkpoint" (a scale
    # ran the checkpoint phase), "checkpoint_history" (a checkpoint figure has a regression floor)
    when: str = "always"
    fixed: dict = field(default_factory=dict)  # the kwargs of a check that holds no threshold


# In suite order (the order failures are listed in).
CHECKS: tuple[_Judged, ...] = (
    _Judged(RUNS_TO_COMPLETE, "state", "state", "state", fixed={"value_set": ["COMPLETED"]}),
    _Judged(
        MEASURED_THROUGHPUT_POSITIVE,
        "throughput_img_s",
        "throughput_img_s",
        "throughput_checked",
        fixed={"min_value": 0, "strict_min": True},
    ),
    _Judged(
        SCALING_EFFICIENCY_AT_LEAST_BOUND,
        "scaling_efficiency",
        "scaling_efficiency_checked",
        "scaling_efficiency_checked",
        bounds.SCALING_EFFICIENCY,
        "min_scaling_efficiency",
    ),
    _Judged(
        THROUGHPUT_NOT_BELOW_SMALLER_SCALE,
        "throughput_img_s",
        "throughput_vs_smaller_checked",
        "throughput_vs_smaller_checked",
        fixed={"min_value": 1.0},
    ),
    _Judged(
        BANDWIDTH_EFFICIENCY_AT_LEAST_BOUND,
        "bandwidth_efficiency",
        "bandwidth_efficiency_checked",
        "bandwidth_efficiency_checked",
        bounds.BANDWIDTH_EFFICIENCY,
        "min_bandwidth_efficiency",
    ),
    _Judged(
        BANDWIDTH_NOT_CACHE_DISTORTED,
        "bandwidth_valid",
        "bandwidth_valid",
        "bandwidth_valid_checked",
        severity="warning",
        fixed={"value_set": [True]},
    ),
    _Judged(GPU_UTILISATION_AT_LEAST_FLOOR, "gpu_util", "gpu_util", "gpu_util", bounds.GPU_UTIL, when="set"),
    _Judged(
        NO_FOREIGN_WORK_ON_SLOTS,
        "foreign_cpu_share",
        "foreign_cpu_share",
        "foreign_cpu_share_checked",
        bounds.FOREIGN_SHARE,
        when="set",
    ),
    _Judged(ACCELERATOR_UTILISATION_AT_LEAST, "au", "au", "au_checked", bounds.AU, when="set"),
    _Judged(
        STORAGE_FEEDS_PLANNED_GPUS,
        "supported_gpus",
        "supported_gpus_checked",
        "supported_gpus_checked",
        bounds.SUPPORTED_GPUS,
        "min_supported_gpus_checked",
        when="set",
    ),
    _Judged(
        THROUGHPUT_NOT_REGRESSED,
        "throughput_img_s",
        "regression_checked_img_s",
        "regression_checked_img_s",
        bounds.REGRESSION,
        "regression_floor",
        when="history",
    ),
    _Judged(
        CHECKPOINT_PHASE_COMPLETED,
        "ckpt_state",
        "ckpt_state",
        "ckpt_state_checked",
        when="checkpoint",
        fixed={"value_set": ["done", "not_cold"]},
    ),
    _Judged(
        CHECKPOINT_WRITE_EFFICIENCY_AT_LEAST_BOUND,
        "ckpt_write_efficiency",
        "ckpt_write_efficiency_checked",
        "ckpt_write_efficiency_checked",
        bounds.CHECKPOINT_EFFICIENCY,
        "min_checkpoint_efficiency",
        when="checkpoint",
    ),
    _Judged(
        CHECKPOINT_READ_EFFICIENCY_AT_LEAST_BOUND,
        "ckpt_read_efficiency",
        "ckpt_read_efficiency_checked",
        "ckpt_read_efficiency_checked",
        bounds.CHECKPOINT_EFFICIENCY,
        "min_checkpoint_efficiency",
        when="checkpoint",
    ),
    _Judged(
        CHECKPOINT_WRITE_NOT_REGRESSED,
        "ckpt_write_mb_s",
        "ckpt_write_checked",
        "ckpt_write_checked",
        bounds.REGRESSION,
        "ckpt_write_floor",
        when="checkpoint_history",
    ),
    _Judged(
        CHECKPOINT_READ_NOT_REGRESSED,
        "ckpt_read_mb_s",
        "ckpt_read_checked",
        "ckpt_read_checked",
        bounds.REGRESSION,
        "ckpt_read_floor",
        when="checkpoint_history",
    ),
)


def _included(row: _Judged, thresholds: Thresholds, present: dict[str, bool]) -> bool:
    if row.when == "set":
        return getattr(thresholds, bounds.BOUNDS[row.limit].threshold) is not None
    return row.when == "always" or present.get(row.when, False)


def _check(row: _Judged, thresholds: Thresholds) -> Check:
    """The row as an expectation: a pair check against its bound column, a column check against the
    threshold (its min_value or max_value from bounds.gx_column), or a fixed one."""
    if row.bound_column is not None:
        kwargs = bounds.gx_pair(row.limit, row.column, row.bound_column)
        return Check(row.name, row.metric, row.value, row.bound_column, row.severity, kwargs, row.limit)
    if row.limit is not None:
        kwargs = {"column": row.column, **bounds.gx_column(row.limit, thresholds)}
        setting = bounds.BOUNDS[row.limit].threshold
        return Check(row.name, row.metric, row.value, setting, row.severity, kwargs, row.limit)
    return Check(row.name, row.metric, row.value, None, row.severity, {"column": row.column, **row.fixed})


def checks(
    thresholds: Thresholds, has_history: bool, has_checkpoint: bool = False, checkpoint_history: bool = False
) -> list[Check]:
    """The suite's expectations, in CHECKS order: those whose threshold is set, the regression check
    where a floor exists, the checkpoint checks where a scale ran the phase (and their regression checks
    where a checkpoint floor exists)."""
    present = {"history": has_history, "checkpoint": has_checkpoint, "checkpoint_history": checkpoint_history}
    return [_check(row, thresholds) for row in CHECKS if _included(row, thresholds, present)]


def prepare(
    frame: pd.DataFrame,
    thresholds: Thresholds,
    history: pd.DataFrame | None = None,
    checkpoint_history: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Add the bound columns the pair expectations compare against; inconclusive rows get no bound.

    `history`: bench.analysis.history.regression.history_stats per row (median, count, spread of past runs);
    `checkpoint_history`: the same for each checkpoint figure (ckpt_write_mb_s, ckpt_read_mb_s) that has one."""
    f = frame.copy()
    reasons = f["inconclusive_reason"] if "inconclusive_reason" in f else pd.Series("", index=f.index)
    judged = (f["gpus"] != f["baseline_gpus"]) & (reasons.fillna("") == "")
    scaling = f["gpus"].map(bounds.bound_at(bounds.SCALING_EFFICIENCY, thresholds)).astype(float)
    bandwidth = f["gpus"].map(bounds.bound_at(bounds.BANDWIDTH_EFFICIENCY, thresholds)).astype(float)
    f["min_scaling_efficiency"] = np.where(judged, scaling, np.nan)
    f["min_bandwidth_efficiency"] = np.where(judged, bandwidth, np.nan)
    f["throughput_checked"] = np.where(f["valid"].astype(bool), f["throughput_img_s"], np.nan)
    f = with_second_run(f, judged, f["valid"].astype(bool) & (reasons.fillna("") == ""))
    foreign = f["foreign_cpu_share"] if "foreign_cpu_share" in f else pd.Series(np.nan, index=f.index)
    # a share over the bound makes the row INCONCLUSIVE (verdict.interference): never a failure of it too
    f["foreign_cpu_share_checked"] = np.where(f["valid"].astype(bool) & (reasons.fillna("") == ""), foreign, np.nan)
    has_bw = f["bandwidth_efficiency"].notna() if "bandwidth_efficiency" in f else pd.Series(False, index=f.index)
    valid_bw = f.get("bandwidth_valid", pd.Series(True, index=f.index)).fillna(False).astype(bool)
    # A scale whose reads sit far below what the store gives and whose data wait did not grow is not judged
    # on bandwidth: its read rate only follows its compute (demand.storage_idle says why).
    idle = f["storage_idle"].fillna("").astype(str) != "" if "storage_idle" in f else pd.Series(False, index=f.index)
    f["bandwidth_efficiency_checked"] = np.where(valid_bw & ~idle, f.get("bandwidth_efficiency", np.nan), np.nan)
    # Only rows that report a bandwidth figure can be cache-distorted; the rest are not judged.
    measured = f.get("avg_read_mb_s", pd.Series(np.nan, index=f.index)).notna() | has_bw
    f["bandwidth_valid_checked"] = pd.Series(np.where(measured, valid_bw, None), index=f.index, dtype=object)
    au = f["au"] if "au" in f else pd.Series(np.nan, index=f.index)
    f["au_checked"] = np.where(f["valid"].astype(bool) & (reasons.fillna("") == ""), au, np.nan)
    for col in ("supported_gpus", "min_supported_gpus"):  # nullable ints -> floats GX can compare
        f[f"{col}_checked"] = pd.to_numeric(f[col], errors="coerce").astype(float) if col in f else np.nan
    f = prepare_checkpoint(f, thresholds, judged, checkpoint_history or {})
    if history is not None:
        from bench.analysis.history.regression import regression_floor

        conclusive = reasons.fillna("") == ""
        stats = history.reindex(f.index)
        f["history_median"] = stats["history_median"].where(conclusive)
        f["history_n"] = stats["history_n"]
        floor, used = regression_floor(stats, thresholds.regression_tolerance)
        f["regression_floor"], f["regression_tolerance_used"] = floor.where(conclusive), used.where(conclusive)
        # The better of the scale's run and its second run where one ran (history.regression: a
        # regression is called only when both fall under the floor).
        repeat = f["repeat_img_s"] if "repeat_img_s" in f else pd.Series(np.nan, index=f.index)
        f["regression_checked_img_s"] = np.fmax(f["throughput_img_s"].astype(float), repeat.astype(float))
        f = noise_columns(f, stats, conclusive, thresholds.regression_tolerance)
    return f


def with_second_run(f: pd.DataFrame, judged: pd.Series, conclusive: pd.Series) -> pd.DataFrame:
    """The columns a scale's second run decides: `repeat_scaling_efficiency` (the ideal's denominator is the
    same, so the second's efficiency is the first's times the ratio of their images/s; NaN without one),
    `scaling_efficiency_checked`, the better of the two (a bound miss is FAILED only when both runs miss it);
    `confirmed_runs` (2 where a second run was measured); and `throughput_vs_smaller_checked`, the
    better of the two runs' images/s over the largest of the workload's smaller conclusive scales' (where
    the scaling bound is judged: a bound of 0 asks for no scaling verdict)."""
    first = f["throughput_img_s"].astype(float)
    repeat = (f["repeat_img_s"] if "repeat_img_s" in f else pd.Series(np.nan, index=f.index)).astype(float)
    best = np.fmax(first, repeat)
    efficiency = f["scaling_efficiency"].astype(float)
    f["repeat_scaling_efficiency"] = (efficiency * repeat / first).where(first > 0)
    f["scaling_efficiency_checked"] = np.fmax(efficiency, f["repeat_scaling_efficiency"])
    f["confirmed_runs"] = np.where(repeat.notna(), 2, 1)
    ratios = []
    for i, r in f.iterrows():
        smaller = f[(f["workload"] == r["workload"]) & (f["gpus"] < r["gpus"]) & conclusive]
        top = smaller["throughput_img_s"].astype(float).max() if not smaller.empty else np.nan
        # judged with the scaling bound: a suite that sets it to 0 asked for no scaling verdict at all
        scaled = judged[i] and bool(f.at[i, "min_scaling_efficiency"])  # NaN only where not judged
        ratios.append(best[i] / top if scaled and top > 0 else np.nan)
    f["throughput_vs_smaller_checked"] = pd.Series(ratios, index=f.index, dtype=float)
    return f


def noise_columns(f: pd.DataFrame, stats: pd.DataFrame, conclusive: pd.Series, tolerance: float) -> pd.DataFrame:
    """`noise_cv` (the series' spread the check used; NaN: too few runs, the fixed tolerance judged) and,
    on a row under its floor, `drop_ci_low` / `drop_ci_high`: the 95% interval of its drop under the
    series' level, from the same judgement (noise.next_judgement) the detector and the overview use."""
    from bench.analysis.history.noise import next_judgement
    from bench.analysis.history.regression import noise_floors

    f["noise_cv"] = noise_floors(stats)["noise_cv"].where(conclusive)
    low, high = pd.Series(np.nan, index=f.index), pd.Series(np.nan, index=f.index)
    values = stats["history_values"] if "history_values" in stats else pd.Series(None, index=f.index)
    fell = [
        bounds.fails(bounds.REGRESSION, v, floor)
        for v, floor in zip(f["regression_checked_img_s"], f["regression_floor"], strict=True)
    ]
    under = conclusive & pd.Series(fell, index=f.index, dtype=bool) & f["noise_cv"].notna()
    for i in f.index[under]:
        drop = next_judgement(values[i], float(f.at[i, "regression_checked_img_s"]), tolerance)
        low[i], high[i] = drop.ci_low, drop.ci_high
    f["drop_ci_low"], f["drop_ci_high"] = low, high
    return f


# Each checkpoint figure: its efficiency, and the state a scale's phase must be in for it to be judged
# (a read the page cache served is shown, never judged).
CHECKPOINT_JUDGED = {
    "ckpt_write_mb_s": ("ckpt_write_efficiency", ("done", "not_cold")),
    "ckpt_read_mb_s": ("ckpt_read_efficiency", ("done",)),
}


def prepare_checkpoint(
    f: pd.DataFrame, thresholds: Thresholds, judged: pd.Series, history: dict[str, pd.DataFrame]
) -> pd.DataFrame:
    """The checkpoint checks' columns: the phase's state on valid rows that ran it (None elsewhere: not
    judged); each efficiency where this row's and its baseline's phase give a judged figure, with the
    bound on the rows the scaling bound is judged on; each figure's regression floor on conclusive rows
    (the better of the scale's two runs where a second ran: `ckpt_*_checked`, set by the evaluation)."""
    from bench.analysis.history.regression import regression_floor

    if "ckpt_state" not in f:
        return f
    valid = f["valid"].astype(bool)
    state = f["ckpt_state"].fillna("").astype(str)
    f["ckpt_state_checked"] = pd.Series(np.where(valid & (state != ""), state, None), index=f.index, dtype=object)
    limit = f["gpus"].map(bounds.bound_at(bounds.CHECKPOINT_EFFICIENCY, thresholds)).astype(float)
    f["min_checkpoint_efficiency"] = np.where(judged & (state != ""), limit, np.nan)
    base_state = {
        w: s for w, g, b, s in zip(f["workload"], f["gpus"], f["baseline_gpus"], state, strict=True) if g == b
    }
    reasons = f["inconclusive_reason"] if "inconclusive_reason" in f else pd.Series("", index=f.index)
    conclusive = reasons.fillna("") == ""
    for figure, (efficiency, states) in CHECKPOINT_JUDGED.items():
        ok = valid & state.isin(states) & f["workload"].map(base_state).isin(states)
        f[f"{efficiency}_checked"] = np.where(ok, f.get(efficiency, np.nan), np.nan)
        checked = figure.replace("_mb_s", "_checked")
        own = valid & state.isin(states)
        first = f[checked] if checked in f else f[figure]
        f[checked] = np.where(own, first.astype(float), np.nan)
        floor_column = figure.replace("_mb_s", "_floor")
        if figure in history:
            floor, _ = regression_floor(history[figure].reindex(f.index), thresholds.regression_tolerance)
            f[floor_column] = floor.where(conclusive & own)
        else:
            f[floor_column] = np.nan
    return f


@dataclass
class Verdict:
    passed: bool
    failures: list[dict]  # critical: workload, gpus, metric, value, bound, expectation
    warnings: list[dict]  # inconclusive rows (e.g. cache-distorted bandwidth)
    per_row: dict[tuple[str, int], list[str]]
    data_docs: str | None = None


def validate(
    frame: pd.DataFrame,
    thresholds: Thresholds,
    data_docs_dir: Path | None = None,
    suite_name: str = "scaling",
) -> Verdict:
    """Run the suite over `frame` (already `prepare`d); failing rows named with value and bound."""
    has_history = "regression_floor" in frame.columns and frame["regression_floor"].notna().any()
    ran = frame["ckpt_state_checked"].notna().any() if "ckpt_state_checked" in frame else False
    floors = [c for c in ("ckpt_write_floor", "ckpt_read_floor") if c in frame.columns]
    plan = checks(thresholds, has_history, bool(ran), any(frame[c].notna().any() for c in floors))
    context, definition = _suite_definition(plan, suite_name)
    data = frame.reset_index(drop=True)
    result_format = {"result_format": "COMPLETE", "unexpected_index_column_names": ["workload", "gpus"]}
    docs_index = None
    if data_docs_dir is not None:
        results = _run_with_data_docs(context, definition, data, result_format, data_docs_dir, suite_name)
        docs_index = str(data_docs_dir / "index.html")
    else:
        results = definition.run(batch_parameters={"dataframe": data}, result_format=result_format).results
    failures, warnings, per_row = _failed_rows(plan, results, data, thresholds)
    return Verdict(not failures, failures, warnings, per_row, docs_index)


def _suite_definition(plan: list[Check], suite_name: str):
    """(context, validation definition): an ephemeral GX context whose suite holds `plan`'s expectations."""
    gx = _gx()
    cls = classes()
    context = gx.get_context(mode="ephemeral")
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas("results")
    asset = source.add_dataframe_asset("frame")
    batch_def = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(gx.ExpectationSuite(name=suite_name))
    for check in plan:
        suite.add_expectation(cls[check.name](**check.kwargs, meta={"severity": check.severity}))
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=suite_name, data=batch_def, suite=suite)
    )
    return context, definition


def _run_with_data_docs(context, definition, data: pd.DataFrame, result_format: dict, docs_dir: Path, suite_name: str):
    """The suite run through a checkpoint that writes Data Docs, made to work offline, in a private folder;
    then published to `docs_dir` without following a link planted in the run folder (data_docs_offline)."""
    from bench.analysis.verdict.data_docs_offline import make_offline, private_site, publish

    gx = _gx()
    with private_site() as site:
        context.add_data_docs_site(
            site_name="scalewatch",
            site_config={
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(site)},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
        checkpoint = context.checkpoints.add(
            gx.Checkpoint(
                name=f"{suite_name}-checkpoint",
                validation_definitions=[definition],
                actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=["scalewatch"])],
                result_format=result_format,
            )
        )
        run = checkpoint.run(batch_parameters={"dataframe": data})
        still_remote = make_offline(site)
        publish(site, docs_dir)
    if still_remote:  # a GX upgrade added a CDN file the bundle lacks: the pages still work online
        logging.getLogger(__name__).warning("Data Docs still load from the network: %s", ", ".join(still_remote))
    return next(iter(run.run_results.values())).results


def _failed_rows(
    plan: list[Check], results, data: pd.DataFrame, thresholds: Thresholds
) -> tuple[list[dict], list[dict], dict[tuple[str, int], list[str]]]:
    """(failures, warnings, each row's failed expectations), in plan order."""
    failures, warnings = [], []
    per_row: dict[tuple[str, int], list[str]] = {
        (w, int(g)): [] for w, g in zip(data["workload"], data["gpus"], strict=True)
    }
    by_type = {res.expectation_config.type: res for res in results}  # GX does not keep suite order
    for check in plan:
        res = by_type[_snake(check.name)]
        if res.success:
            continue
        for idx in res.result.get("unexpected_index_list") or []:
            key = (idx["workload"], int(idx["gpus"]))
            row = data[(data["workload"] == key[0]) & (data["gpus"] == key[1])].iloc[0]
            item = {
                "workload": key[0],
                "gpus": key[1],
                "metric": check.metric,
                "expectation": check.name,
                "value": _plain(row.get(check.value)),
                "bound": _bound(check, row, thresholds),
            }
            if check.name == RUNS_TO_COMPLETE:
                item["reason"] = str(row.get("reason", ""))
            if check.name == CHECKPOINT_PHASE_COMPLETED:
                item["reason"] = str(row.get("ckpt_note", ""))
            (failures if check.severity == "critical" else warnings).append(item)
            per_row[key].append(check.name)
    return failures, warnings, per_row


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _plain(value):
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else round(float(value), 4)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def _bound(check: Check, row: pd.Series, thresholds: Thresholds):
    if check.bound is None:
        return {
            RUNS_TO_COMPLETE: "COMPLETED",
            MEASURED_THROUGHPUT_POSITIVE: "> 0",
            CHECKPOINT_PHASE_COMPLETED: "done",
        }.get(check.name, "cache-free 1st epoch")
    if check.limit is not None and "column" in check.kwargs:  # a column check: the threshold itself
        return bounds.bound(check.limit, int(row["gpus"]), thresholds)
    return _plain(row.get(check.bound))
