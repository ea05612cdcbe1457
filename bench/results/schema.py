"""The results schema: every column of the results frame and of the store's `results` table, named once.

Each column is declared here with its dtype, its unit, the group that fills it and whether the store
keeps it; a column that is a bound says which figure it bounds and which `Thresholds` field sets it,
and a figure judged against a threshold directly says which. The frame (`bench.analysis.frame`), the
verdict modules, the store (`bench.store.tables`) and the report import their column lists from here;
elsewhere a column name only appears where it is used (a dict key, `frame["x"]`). The names are a
checked contract (docs/schemas.md): renaming one is a store migration and a frame schema version.

Import direction: this module imports only the standard library (and `bench.config` for types), so the
store and the analysis both sit above it and neither needs the other for a column list.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from bench.config.models import Thresholds

FRAME_SCHEMA_VERSION = 6

Dtype = Literal["int", "float", "bool", "text", "object"]
DTYPES: tuple[str, ...] = ("int", "float", "bool", "text", "object")
# Units: "ratio" is unbounded (an efficiency may pass 1), "fraction" a share in [0, 1]; "label" is text
# from a vocabulary or free text, "json" a JSON document, "flag" a boolean.
UNITS: tuple[str, ...] = (
    "images/s",
    "images/s per GPU",
    "s",
    "MB/s",
    "MB/s per GPU",
    "GB/s",
    "bytes",
    "bytes/image",
    "%",
    "fraction",
    "ratio",
    "GPUs",
    "count",
    "rank",
    "label",
    "json",
    "timestamp",
    "flag",
    "version",
)


@dataclass(frozen=True)
class Bound:
    """A bound `figure` is held to: at least it (`side` "min", a floor) or at most it ("max"). `threshold`:
    the `Thresholds` field that sets it (None where the history or the run's config does, per row). `name`:
    what the verdict calls it (bench.analysis.verdict.bounds, keyed by it), where not the figure's name:
    one bound may hold several figures (checkpoint write and read, every regression floor)."""

    figure: str
    side: Literal["min", "max"]
    threshold: str | None = None
    name: str = ""

    @property
    def key(self) -> str:
        return self.name or self.figure

    @property
    def floor(self) -> bool:
        """A figure at or above the bound passes (a ceiling: at or below it)."""
        return self.side == "min"


@dataclass(frozen=True)
class Column:
    name: str
    dtype: Dtype
    unit: str
    group: str  # what fills it: key, run, metric (the run's summary), scaling, verdict, bottleneck, ...
    stored: bool = True  # a column of the store's `results` table
    bound: Bound | None = None  # set where the column is itself a bound (its per-row value)
    held_to: Bound | None = None  # set where the figure is judged against a threshold directly


def _held(side: Literal["min", "max"], threshold: str, name: str = "") -> Bound:
    """`held_to` of the column it is declared on (its figure filled in by _c)."""
    return Bound("", side, threshold, name)


def _c(name: str, dtype: Dtype, unit: str, group: str, **kw) -> Column:
    if kw.get("held_to") is not None:
        kw["held_to"] = replace(kw["held_to"], figure=name)
    return Column(name, dtype, unit, group, **kw)


# Declared in the store's column order: the frame's columns first (key, run, metrics), then what the
# verdict derives, then the later groups as their revisions added them.
RESULT_COLUMNS: tuple[Column, ...] = (
    # key of a frame row
    _c("suite_run_id", "text", "label", "key"),
    _c("workload", "text", "label", "key"),
    _c("gpus", "int", "GPUs", "key"),
    _c("state", "text", "label", "run"),
    _c("valid", "bool", "flag", "run"),
    # figures read from the run's summary (`bench.analysis.frame.row_from_result`)
    _c("throughput_img_s", "float", "images/s", "metric"),
    _c("throughput_ci_low", "float", "images/s", "metric"),
    _c("throughput_ci_high", "float", "images/s", "metric"),
    _c("measured_s", "float", "s", "metric"),
    _c("min_measure_s", "float", "s", "metric", bound=Bound("measured_s", "min")),
    _c("step_time_spread", "float", "ratio", "metric", held_to=_held("max", "max_step_time_spread")),
    _c("epoch_time_s", "float", "s", "metric"),
    _c("first_epoch_time_s", "float", "s", "metric"),
    _c("avg_read_mb_s", "float", "MB/s", "metric"),
    _c("peak_read_mb_s", "float", "MB/s", "metric"),
    _c("gpu_util", "float", "%", "metric", held_to=_held("min", "min_gpu_util")),
    _c("gpu_mem_util", "float", "%", "metric"),
    _c("cpu_util", "float", "%", "metric"),
    _c("mem_util", "float", "%", "metric"),
    _c("bytes_from_storage", "float", "bytes", "metric"),
    _c("bytes_consumed", "float", "bytes", "metric"),
    _c("dataset_bytes", "float", "bytes", "metric"),
    _c("data_wait_share", "float", "fraction", "metric"),
    _c("compute_share", "float", "fraction", "metric"),
    _c("comm_share", "float", "fraction", "metric"),
    _c("au", "float", "fraction", "metric", held_to=_held("min", "min_au")),
    _c("gpu_busy_share", "float", "fraction", "metric"),
    _c("straggler_gap", "float", "fraction", "metric", held_to=_held("max", "straggler_gap")),
    # the run's labels and provenance
    _c("cache_risk", "bool", "flag", "run"),
    _c("cache_served", "bool", "flag", "run"),
    _c("bandwidth_valid", "bool", "flag", "run"),
    _c("bandwidth_note", "text", "label", "run"),
    _c("bytes_source", "text", "label", "run"),
    # the store's failed tries the ranks retried (S3 GETs; 0 where none, NULL on files): above 0 INCONCLUSIVE
    _c("storage_errors", "int", "count", "run"),
    _c("drop_caches", "text", "label", "run"),
    _c("oversubscribed", "bool", "flag", "run"),
    _c("slots", "text", "json", "run"),
    _c("slowest_rank", "int", "rank", "run"),
    _c("slowest_host", "text", "label", "run"),
    _c("rank_breakdown", "text", "json", "run"),
    _c("launcher", "text", "label", "run"),
    _c("backend", "text", "label", "run"),
    _c("precision", "text", "label", "run"),
    _c("config_key", "text", "label", "run"),
    _c("cluster", "text", "label", "run"),
    _c("started_at", "text", "timestamp", "run"),
    _c("reason", "text", "label", "run"),
    _c("versions", "text", "json", "run"),
    _c("schema_version", "int", "version", "run"),
    # the frame's replicates for the efficiency interval: in memory only
    _c("throughput_boot", "object", "images/s", "run", stored=False),
    # scaling against the baseline scale (bench.analysis.verdict.scaling)
    _c("baseline_gpus", "int", "GPUs", "scaling", stored=False),
    _c("speedup", "float", "ratio", "scaling", stored=False),
    _c("scaling_efficiency", "float", "ratio", "scaling"),
    _c("scaling_efficiency_ci_low", "float", "ratio", "scaling"),
    _c("scaling_efficiency_ci_high", "float", "ratio", "scaling"),
    _c("bandwidth_efficiency", "float", "ratio", "scaling"),
    _c("bandwidth_per_gpu", "float", "MB/s per GPU", "scaling", stored=False),
    _c("peak_avg_ratio", "float", "ratio", "scaling", stored=False),
    _c("fit_slope", "float", "images/s per GPU", "scaling", stored=False),
    _c("fit_r2", "float", "ratio", "scaling", stored=False),
    # the bounds each row is held to (bench.analysis.verdict.expectations)
    _c(
        "min_scaling_efficiency",
        "float",
        "ratio",
        "verdict",
        stored=False,
        bound=Bound("scaling_efficiency", "min", "min_scaling_efficiency"),
    ),
    _c(
        "min_bandwidth_efficiency",
        "float",
        "ratio",
        "verdict",
        stored=False,
        bound=Bound("bandwidth_efficiency", "min", "min_bandwidth_efficiency"),
    ),
    # the verdict (bench.analysis.verdict.rules, .expectations)
    _c("verdict", "text", "label", "verdict"),
    _c("inconclusive_reason", "text", "label", "verdict"),
    _c("borderline", "bool", "flag", "verdict"),
    _c("passed", "bool", "flag", "verdict"),
    _c("failed_expectations", "text", "label", "verdict"),
    _c("accepted", "bool", "flag", "verdict"),
    # the cause (bench.analysis.verdict.bottleneck)
    _c("bottleneck", "text", "label", "bottleneck"),
    _c("bottleneck_evidence", "text", "label", "bottleneck"),
    # the regression check against the series' history (bench.analysis.history.regression)
    _c("history_median", "float", "images/s", "regression", stored=False),
    _c("history_n", "int", "count", "regression", stored=False),
    _c(
        "regression_floor",
        "float",
        "images/s",
        "regression",
        stored=False,
        bound=Bound("regression_checked_img_s", "min", name="regression"),
    ),
    _c("regression_tolerance_used", "float", "fraction", "regression", stored=False),
    _c("repeat_img_s", "float", "images/s", "regression"),  # revision 0013
    _c("regression_checked_img_s", "float", "images/s", "regression", stored=False),
    # the noise model (bench.analysis.history.noise, revision 0020): the spread used (NULL: too few runs,
    # the fixed tolerance judged) and a regressed row's drop interval (relative, positive: lower)
    _c("noise_cv", "float", "fraction", "regression"),
    _c("drop_ci_low", "float", "fraction", "regression"),
    _c("drop_ci_high", "float", "fraction", "regression"),
    # differential reruns (bench.analysis.verdict.differential, revision 0006)
    _c("warm_efficiency", "float", "ratio", "differential"),
    _c("synthetic_efficiency", "float", "ratio", "differential"),
    _c("fetch_stall", "float", "fraction", "differential"),
    _c("prep_stall", "float", "fraction", "differential"),
    _c("rerun_removed", "text", "label", "differential"),  # warm, synthetic, neither; "" where not rerun
    _c("cause_check", "text", "label", "differential"),
    # storage sizing (bench.analysis.verdict.sizing)
    _c("per_gpu_read_mb_s", "float", "MB/s per GPU", "sizing"),
    _c("per_gpu_peak_mb_s", "float", "MB/s per GPU", "sizing"),
    _c("img_s_per_gpu", "float", "images/s per GPU", "sizing"),
    _c("bytes_per_image", "float", "bytes/image", "sizing"),
    _c("storage_ceiling_mb_s", "float", "MB/s", "sizing"),
    # expected scaling from measured ceilings (bench.analysis.verdict.ceilings, revisions 0010, 0012)
    _c("independent_img_s", "float", "images/s", "ceiling"),
    _c("linear_efficiency", "float", "ratio", "ceiling"),
    _c("independent_efficiency", "float", "ratio", "ceiling"),
    _c("expected_img_s", "float", "images/s", "ceiling"),
    _c("expected_efficiency", "float", "ratio", "ceiling"),
    _c("efficiency_vs_expected", "float", "ratio", "ceiling"),
    _c("allreduce_s", "float", "s", "ceiling"),
    _c("allreduce_bytes", "float", "bytes", "ceiling"),
    _c("allreduce_bus_gb_s", "float", "GB/s", "ceiling"),
    _c("allreduce_latency_s", "float", "s", "ceiling"),
    _c("foreign_cpu_share", "float", "fraction", "ceiling", held_to=_held("max", "max_foreign_share", "foreign_share")),
    _c("ideal", "text", "label", "ceiling"),
    _c("expected_bound_by", "text", "label", "ceiling"),
    _c("ceiling_note", "text", "label", "ceiling"),
    _c("foreign_top", "text", "label", "ceiling"),
    # the supported GPU counts, on the row that set the workload's demand (bench.analysis.verdict.sizing)
    _c("supported_gpus", "int", "GPUs", "sizing"),
    _c("supported_gpus_peak", "int", "GPUs", "sizing"),
    _c("supported_gpus_au", "int", "GPUs", "sizing"),
    _c("min_supported_gpus", "int", "GPUs", "sizing", bound=Bound("supported_gpus", "min", "min_supported_gpus")),
    # the suite DAG that wrote the row ('' for `bench sweep`): part of the store's key since revision 0008
    _c("dag_id", "text", "label", "store"),
    # how the run came about (issue 50, revision 0021): Airflow's run type, "scheduled" for the scheduler's
    # own runs and "manual" for a triggered one or `bench sweep`; NULL on rows stored before, unknown
    _c("run_type", "text", "label", "store"),
    # the storage ceiling's node count and what binds it (bench.suite.node_probe, revision 0017)
    _c("probe_nodes", "int", "count", "sizing"),
    _c("storage_bound", "text", "label", "sizing"),
    # the checkpoint phase after the scale's training and the saves during it (the summary's `checkpoint`,
    # bench.train.checkpointing; revision 0015): aggregate write and read MB/s (a checkpoint lasts as long
    # as its slowest rank), bytes written, and the share of measured step time the saves took
    _c("ckpt_write_mb_s", "float", "MB/s", "checkpoint"),
    _c("ckpt_read_mb_s", "float", "MB/s", "checkpoint"),
    _c("ckpt_bytes", "float", "bytes", "checkpoint"),
    _c("ckpt_stall_share", "float", "fraction", "checkpoint"),
    # the phase's outcome: done, failed ("" where it did not run) and why it failed; in memory only
    _c("ckpt_state", "text", "label", "checkpoint", stored=False),
    _c("ckpt_note", "text", "label", "checkpoint", stored=False),
    # checkpoint MB/s per GPU against the baseline's, against the same ideal as read bandwidth
    # (bench.analysis.verdict.scaling), the bound they are held to, and each one's regression floor
    _c("ckpt_write_efficiency", "float", "ratio", "scaling", stored=False),
    _c("ckpt_read_efficiency", "float", "ratio", "scaling", stored=False),
    _c(
        "min_checkpoint_efficiency",
        "float",
        "ratio",
        "verdict",
        stored=False,
        # and ckpt_read_efficiency, held to the same bound
        bound=Bound("ckpt_write_efficiency", "min", "min_checkpoint_efficiency", "checkpoint_efficiency"),
    ),
    _c(
        "ckpt_write_floor",
        "float",
        "MB/s",
        "regression",
        stored=False,
        bound=Bound("ckpt_write_checked", "min", name="regression"),
    ),
    _c(
        "ckpt_read_floor",
        "float",
        "MB/s",
        "regression",
        stored=False,
        bound=Bound("ckpt_read_checked", "min", name="regression"),
    ),
    # the better of the scale's run and its second run: what the floor was held against; stored (revision
    # 0015) so that the overview judges the figure the verdict judged, not the first run's
    _c("ckpt_write_checked", "float", "MB/s", "regression"),
    _c("ckpt_read_checked", "float", "MB/s", "regression"),
    # an emulated accelerator's scale (bench.workloads.emulate, revision 0016): its profile's name, '' when
    # the model trained for real; NULL on rows stored before (all real)
    _c("emulated", "bool", "flag", "run"),
    _c("accelerator", "text", "label", "run"),
    # one node against its peers (bench.analysis.verdict.nodes, revision 0019): each node's figures of
    # the scale (the summary's `nodes`, with its ranks' compute rate) and the host that stands out ('' none)
    _c("node_figures", "text", "json", "run"),
    _c("slow_node", "text", "label", "bottleneck"),
)
BY_NAME: dict[str, Column] = {c.name: c for c in RESULT_COLUMNS}
NAMES: frozenset[str] = frozenset(BY_NAME)


def _names(*groups: str, dtype: str | None = None) -> tuple[str, ...]:
    return tuple(c.name for c in RESULT_COLUMNS if c.group in groups and (dtype is None or c.dtype == dtype))


# A frame row's key; the store's key adds the DAG.
KEY: tuple[str, ...] = _names("key")
STORE_KEY: tuple[str, ...] = ("dag_id", *KEY)
# A series: the runs whose figures are compared over time (history, change points, annotations).
SERIES_KEY: tuple[str, ...] = ("cluster", "workload", "gpus", "config_key")
# A scale's node line on the overview: which run named which node, newest first per series; and its worst
# rank's foreign share and process (a node that loses its cores to one process run after run, issue 62).
NODE_LINE: tuple[str, ...] = (
    "suite_run_id",
    "cluster",
    "workload",
    "gpus",
    "started_at",
    "slow_node",
    "foreign_cpu_share",
    "foreign_top",
)
# What names one stored row of a run and whether history takes it: the history readers' first columns.
RUN_ROW: tuple[str, ...] = ("dag_id", "suite_run_id", *SERIES_KEY, "started_at", "accepted", "verdict")
# The checkpoint figures from the run's summary (floats; NaN where the phase or the saves did not run).
CHECKPOINT_FIGURES: tuple[str, ...] = tuple(n for n in _names("checkpoint", dtype="float") if BY_NAME[n].stored)
CHECKPOINT_LABELS: tuple[str, ...] = _names("checkpoint", dtype="text")
# The checkpoint rates (MB/s): judged for scaling and against history.
CHECKPOINT_RATES: tuple[str, ...] = tuple(n for n in CHECKPOINT_FIGURES if BY_NAME[n].unit == "MB/s")
# The run's figures from its summary (floats; NaN where the run did not complete).
METRICS: tuple[str, ...] = _names("metric") + CHECKPOINT_FIGURES
# The frame `bench.analysis.frame.build_frame` makes, in order (the phase's labels too, never stored).
COLUMNS: tuple[str, ...] = tuple(n for n in _names("key", "run", "metric") if BY_NAME[n].stored)
COLUMNS += CHECKPOINT_FIGURES + CHECKPOINT_LABELS
# Every column of the store's `results` table, in order.
STORED: tuple[str, ...] = tuple(c.name for c in RESULT_COLUMNS if c.stored)
# The groups the verdict adds, as the modules that fill them name them.
CEILING_FLOATS: tuple[str, ...] = _names("ceiling", dtype="float")
CEILING_LABELS: tuple[str, ...] = _names("ceiling", dtype="text")
DIFFERENTIAL_FIGURES: tuple[str, ...] = _names("differential", dtype="float")
DIFFERENTIAL_LABELS: tuple[str, ...] = _names("differential", dtype="text")
SIZING_FLOATS: tuple[str, ...] = _names("sizing", dtype="float")
SIZING_COUNTS: tuple[str, ...] = _names("sizing", dtype="int")
# The results columns of the scale's allreduce probe and the summary field ("allreduce",
# bench.train.dist.allreduce_probe) each is read from.
PROBE_FIELDS: dict[str, str] = {
    "allreduce_s": "seconds",
    "allreduce_bytes": "bytes",
    "allreduce_bus_gb_s": "bus_gb_s",
    "allreduce_latency_s": "latency_s",
}
# A stored figure the store keeps NULL where its row's label says it was not measured as the column
# means: figure -> (label column, label value). The in-memory frame keeps it (the report shows it with
# its label); history (regression floors, series bands, charts) never sees it, whoever reads the store.
# A restore the page cache served is memory's speed, not the store's: a floor learnt from it would
# call every later cold restore a regression (docs/faults.md row 128).
WITHHELD: dict[str, tuple[str, str]] = {"ckpt_read_mb_s": ("ckpt_state", "not_cold")}
# Bound column -> its Bound; figure -> the Bound it is held to directly.
BOUNDS: dict[str, Bound] = {c.name: c.bound for c in RESULT_COLUMNS if c.bound is not None}
HELD_TO: dict[str, Bound] = {c.name: c.held_to for c in RESULT_COLUMNS if c.held_to is not None}


def _verdict_bounds() -> dict[str, Bound]:
    """Every bound by the verdict's name for it: the one table of which threshold bounds which figure
    (bench.analysis.verdict.bounds reads it). A name declared on several columns holds one rule."""
    out: dict[str, Bound] = {}
    for b in (*BOUNDS.values(), *HELD_TO.values()):
        seen = out.setdefault(b.key, b)
        if (seen.side, seen.threshold) != (b.side, b.threshold):
            raise ValueError(f"bound {b.key!r} is declared as {seen} and as {b}")
    return out


VERDICT_BOUNDS: dict[str, Bound] = _verdict_bounds()

# A scale's extra runs, as a run record's `variant` names them ("" is the scale's own run): written once
# here, below both the suite that runs them (bench.suite.plan) and the verdict that reads them.
INDEPENDENT = "independent"  # the scale's ranks as independent copies: its node ceiling
REPEAT = "repeat"  # the scale run once more before a regression or a bound miss is called
# A scale (and its node ceiling) measured under interference, measured once more after the last scale
# (bench.analysis.verdict.interference): the later run is the one judged.
REMEASURE, REMEASURE_INDEPENDENT = "remeasure", "remeasure-independent"
WARM, SYNTHETIC = "warm", "synthetic"  # the differential reruns that take storage, then input, out

# Change points (the store's `change_alerts` table, bench.analysis.history.changes): the key of one and
# its states. pending: news not yet delivered to every alert target; alerted: delivered to all of them
# (revision 0014).
CHANGE_KEY: tuple[str, ...] = (*SERIES_KEY, "metric", "changed_at")
PENDING, ALERTED, RECORDED, RECOVERED, RECOVERY = "pending", "alerted", "recorded", "recovered", "recovery"
CHANGE_STATES: tuple[str, ...] = (PENDING, ALERTED, RECORDED, RECOVERED, RECOVERY)


def column(name: str) -> Column:
    """The declaration of a results column; KeyError names an undeclared one."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a results column (bench/results/schema.py)") from None


def scaling_bound(thresholds: Thresholds, gpus: int) -> float:
    """`min_scaling_efficiency` of a row at `gpus`: the bound its scaling_efficiency is held to
    (`Thresholds.scaling_bound`, the one lookup by GPU count, kept beside the thresholds in bench.config)."""
    return thresholds.scaling_bound(int(gpus))
