"""The history page's first screen: one line per series, worst first, with a sparkline, a "needs
attention" filter and one roll-up line per cluster; and the same lines for the JSON API.

Reads a bounded slice of the store per request: the newest `RECENT_RUNS` rows of each series the user
may read (SQL's row_number, filtered in SQL), its change points and annotations, the newest probes and
the thresholds of each series' latest run. The judging is bench.analysis.history.overview's.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

from bench.results.schema import NODE_LINE
from scalewatch.web.reading import thresholds_of

SPARK_W, SPARK_H = 120, 24
FIGURE_NAMES = {"ckpt_write_mb_s": "checkpoint write", "ckpt_read_mb_s": "checkpoint read"}


def sparkline(values: list[float | None], status: str = "ok") -> Markup:
    """A small inline SVG of the last runs (gaps where a run was not accepted); nothing to draw: empty."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return Markup("")
    low, high = min(v for _, v in points), max(v for _, v in points)
    span, step = (high - low) or 1.0, SPARK_W / max(len(values) - 1, 1)
    coords = " ".join(f"{i * step:.1f},{SPARK_H - 2 - (v - low) / span * (SPARK_H - 4):.1f}" for i, v in points)
    colour = "#cf222e" if status == "regressed" else "#555"
    last_x, last_y = coords.split(" ")[-1].split(",")
    return Markup(
        f'<svg class="spark" width="{SPARK_W}" height="{SPARK_H}" viewBox="0 0 {SPARK_W} {SPARK_H}" role="img" '
        f'aria-label="last {len(values)} runs"><polyline fill="none" stroke="{colour}" stroke-width="1.5" '
        f'points="{escape(coords)}"/><circle cx="{last_x}" cy="{last_y}" r="2" fill="{colour}"/></svg>'
    )


@dataclass(frozen=True)
class Scope:
    """Which series a request looks at: the user's readable DAGs and the filters (None: any)."""

    dag_ids: list[str]
    cluster: str | None = None
    workload: str | None = None
    config_key: str | None = None
    gpus: int | None = None


def lines_for(store, scope: Scope, series: list[tuple] | None = None) -> list[dict]:
    """Every series line in scope (or of these `series` keys only), worst first, then the series'
    checkpoint lines (figure `ckpt_write_mb_s`, `ckpt_read_mb_s`), worst first: from the same rows."""
    from bench.analysis.history.overview import COLUMNS, RECENT_RUNS, checkpoint_lines, overview_lines

    recent = store.results_of(
        scope.dag_ids,
        COLUMNS,
        newest=RECENT_RUNS,
        cluster=scope.cluster,
        workload=scope.workload,
        config_key=scope.config_key,
        gpus=scope.gpus,
        series=series,
    )
    if recent.empty:
        return []
    latest = recent.sort_values("started_at").groupby(["cluster", "workload", "gpus", "config_key"]).tail(1)
    thresholds = thresholds_of(store, scope.dag_ids, latest["suite_run_id"].astype(str).tolist())
    # only change points at a run the user may read: a series' change found in a hidden DAG's runs alone
    # would otherwise show as `change` here
    changes, notes = store.change_alerts(scope.cluster, scope.dag_ids), store.annotations(scope.cluster)
    lines = overview_lines(recent, changes, notes, None, thresholds) + checkpoint_lines(recent, notes, None, thresholds)
    return with_storage(store, scope, lines)


def with_storage(store, scope: Scope, lines: list[dict]) -> list[dict]:
    """Each line with `storage`: the storage under test of its latest run, as that run's report and alert
    named it (`S3 (endpoint, bucket)`, `PATH on FSTYPE SOURCE`; kept with the run's environment by
    bench.suite.record.store_run), None for a run recorded before it was kept."""
    envs = store.environments({str(line["latest_run"]) for line in lines}, dag_ids=scope.dag_ids)
    return [line | {"storage": envs.get(str(line["latest_run"]), {}).get("storage")} for line in lines]


def ceilings_for(store, scope: Scope) -> list[dict]:
    """The storage-ceiling lines in scope (none when the scope names a workload, config or scale)."""
    from bench.analysis.history.overview import RECENT_RUNS, ceiling_lines

    if scope.workload or scope.config_key or scope.gpus:
        return []
    probes = store.recent_probes(scope.dag_ids, RECENT_RUNS, scope.cluster)
    if probes.empty:
        return []
    # each line is judged with its newest probe's run's tolerance and window, as the suite judged it
    newest = probes.sort_values("probed_at").groupby(["cluster", "paths", "sample_bytes"]).tail(1)
    return ceiling_lines(probes, None, thresholds_of(store, scope.dag_ids, newest["suite_run_id"].astype(str).tolist()))


def nodes_for(store, scope: Scope) -> list[dict]:
    """The node lines of the overview (issue 49): each node the newest run of a cluster in scope named as
    standing out against its peers, marked "(one run)" (bench.analysis.history.node_health), then each
    node whose ranks lost their cores to the same process in 3 of the cluster's last 5 runs (issue 62,
    bench.analysis.history.interference: `kind` "interference", with its process, share and runs), from
    the newest RECENT_RUNS rows of each series, as the series lines read them. The across-runs slowness
    rule (the slowest in 3 of 5 runs) needs every rank's figures: it is shown on a series' page."""
    from bench.analysis.history.interference import interfering_nodes
    from bench.analysis.history.node_health import named_in_newest_run
    from bench.analysis.history.overview import RECENT_RUNS

    recent = store.results_of(
        scope.dag_ids,
        NODE_LINE,
        newest=RECENT_RUNS,
        cluster=scope.cluster,
        workload=scope.workload,
        config_key=scope.config_key,
        gpus=scope.gpus,
    )
    return named_in_newest_run(recent, set()) + interfering_nodes(recent)


def page_context(lines: list[dict], ceilings: list[dict], attention: bool, nodes: list[dict] = ()) -> dict:
    """What the template shows: the roll-up over all lines, the (filtered) series lines, checkpoint lines
    and ceiling lines with their sparklines, and the node lines; "needs attention" counts every line that
    needs it."""
    from bench.analysis.history.overview import NEEDS_ATTENTION, needs_attention, rollup

    def drawn(rows: list[dict]) -> list[dict]:
        rows = needs_attention(rows) if attention else rows
        return [line | {"spark_svg": sparkline(line["spark"], line["status"])} for line in rows]

    series = [line for line in lines if line["figure"] == "throughput_img_s"]
    checkpoints = [line for line in lines if line["figure"] != "throughput_img_s"]
    return {
        "rollup": rollup(lines),  # series and their checkpoint lines
        "lines": drawn(series),
        "checkpoints": drawn(checkpoints),
        "ceilings": drawn(ceilings),
        "nodes": list(nodes),  # shown whatever the filter: a node that stands out needs attention
        "attention": attention,
        "total": len(series),
        "attention_count": len(needs_attention(lines + ceilings)),
        "needs_attention": NEEDS_ATTENTION,
        "figure_names": FIGURE_NAMES,
    }
