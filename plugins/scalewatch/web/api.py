"""The JSON API under the plugin (docs/schemas.md, "History API"): the overview's series and node lines,
one series' points, one suite run, and two runs compared. Same login and same per-DAG read checks as the pages:
a user sees only rows of DAGs Airflow lets them read; a series or run of no readable DAG is a 404, told
alike whether it exists or not; and nothing derived from an unreadable DAG's rows (a run's fingerprint,
compare's noise history) is answered, even for a suite run id another DAG holds too. Query parameters
are validated here (pydantic, unknown ones refused) and a bad one is a 400 that names it. Every query is
bounded: paged in SQL or cut to the newest runs of each series, never a whole-table read.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from bench.analysis.history.overview import STATUSES
from bench.config.types import NAME_RE, WORKLOADS, Frozen
from scalewatch.web.auth import current_user

router = APIRouter()
User = Annotated[object, Depends(current_user)]
MAX_LIMIT = 500
# Far past any page a store holds, far under SQLite's INTEGER (2**63 - 1): a larger offset is a 400 naming
# it, not an OverflowError (a 500) where SQLite binds it (issue 48).
MAX_OFFSET = 1_000_000_000
Status = Literal[STATUSES]  # every overview status (bench.analysis.history.overview.STATUSES), no second list
# An overview line's `figure`: a series' images/s, its checkpoint write or read MB/s, a storage ceiling.
Figure = Literal["throughput_img_s", "ckpt_write_mb_s", "ckpt_read_mb_s", "ceiling_mb_s"]
FIGURE_ORDER = ("throughput_img_s", "ckpt_write_mb_s", "ckpt_read_mb_s", "ceiling_mb_s")
POINT_COLUMNS = (
    "dag_id",
    "suite_run_id",
    "started_at",
    "accepted",
    "verdict",
    "throughput_img_s",
    "throughput_ci_low",
    "throughput_ci_high",
    "scaling_efficiency",
    "scaling_efficiency_ci_low",
    "scaling_efficiency_ci_high",
    "avg_read_mb_s",
    "peak_read_mb_s",
)
RUN_COLUMNS = ("dag_id", "workload", "gpus", "config_key", *POINT_COLUMNS[2:], "reason")


class Page(Frozen):
    limit: int = Field(50, ge=1, le=MAX_LIMIT)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)


class Filtered(Frozen):
    """A cluster and a workload filter, each refused unless it is a name the suite gives (the series' and
    the node lines' queries alike)."""

    cluster: str | None = None
    workload: str | None = None

    @field_validator("cluster")
    @classmethod
    def _cluster(cls, value: str | None) -> str | None:
        return checked_cluster(value)

    @field_validator("workload")
    @classmethod
    def _workload(cls, value: str | None) -> str | None:
        return checked_workload(value)


class SeriesQuery(Page, Filtered):
    status: Status | None = None
    # key: series in (cluster, workload, gpus, config) order, paged in SQL (only the page's series are
    # read and judged); worst: the overview's order, which judges every series first
    order: Literal["key", "worst"] = "key"
    # which lines: a series' images/s line (the default, as before checkpoint lines existed), its
    # checkpoint write or read line, the storage-ceiling lines, or every line (`all`)
    figure: Figure | Literal["all"] = "throughput_img_s"


def checked_cluster(value: str | None) -> str | None:
    """A cluster filter as the suite names clusters (NAME_RE); anything else is refused, naming it."""
    if value is not None and not NAME_RE.fullmatch(value):
        raise ValueError(f"cluster {value!r} does not match {NAME_RE.pattern}")
    return value


def checked_workload(value: str | None) -> str | None:
    """A workload filter among the known workloads; anything else is refused, naming the choices."""
    if value is not None and value not in WORKLOADS:
        raise ValueError(f"workload {value!r} is not one of {', '.join(WORKLOADS)}")
    return value


class NodesQuery(Filtered):
    """/api/nodes: the overview's node lines, filtered as the series are (they are few: no paging)."""


class PointsQuery(Page):
    pass


class RunQuery(Frozen):
    dag_id: str | None = Field(None, max_length=250)


class CompareQuery(Frozen):
    a: str = Field(min_length=1, max_length=250)
    b: str = Field(min_length=1, max_length=250)


def parse_query(model: type[Frozen], request: Request):
    """The request's query parameters as `model`: a repeated or unknown one, or a bad value, is a 400
    naming the field (and, for a choice, the allowed values)."""
    from bench.config.types import parse
    from bench.errors import ConfigError

    params = request.query_params
    repeated = sorted({k for k in params if len(params.getlist(k)) > 1})
    if repeated:
        raise HTTPException(status_code=400, detail=f"{', '.join(repeated)}: given more than once")
    try:
        return parse(model, dict(params))
    except ConfigError as error:
        raise HTTPException(status_code=400, detail=str(error)) from None


def _store_and_dags(user):
    from bench.errors import ConfigError
    from scalewatch.paths import results_url
    from scalewatch.web.reading import read_store, readable_dags

    try:
        store = read_store(results_url())
    except ConfigError as error:
        raise HTTPException(status_code=503, detail=str(error)) from None
    return store, readable_dags(user, store)


def _records(frame) -> list[dict]:
    """JSON-safe rows: NaN as null, numpy scalars as Python ones."""
    import json

    return (
        json.loads(frame.to_json(orient="records", date_format="iso", double_precision=15)) if not frame.empty else []
    )


def _key(line: dict) -> tuple:
    return (line["cluster"], line["workload"], line["gpus"], line["config_key"])


def _key_order(line: dict) -> tuple:
    """Series key order for lines of any figure (a ceiling line has no GPUs)."""
    gpus = line["gpus"] if line["gpus"] is not None else -1
    return (line["cluster"], line["workload"], gpus, line["config_key"], FIGURE_ORDER.index(line["figure"]))


def _lines(store, scope, figure: str) -> list[dict]:
    """Every line of `figure` (or of all figures) in scope, worst first."""
    from bench.analysis.history.overview import worst_first
    from scalewatch.web.overview import ceilings_for, lines_for

    lines = lines_for(store, scope) if figure != "ceiling_mb_s" else []
    if figure in ("ceiling_mb_s", "all"):
        lines += ceilings_for(store, scope)
    return worst_first([line for line in lines if figure in ("all", line["figure"])])


def series_page(user, query: SeriesQuery) -> dict:
    from scalewatch.web.overview import Scope, lines_for

    store, dags = _store_and_dags(user)
    scope = Scope(dags, query.cluster, query.workload)
    if not dags:
        page, total = [], 0
    elif query.order == "key" and query.status is None and query.figure == "throughput_img_s":
        # paged in SQL: only this page's series are read
        keys, total = store.series_keys(dags, query.limit, query.offset, cluster=query.cluster, workload=query.workload)
        lines = [line for line in lines_for(store, scope, keys) if line["figure"] == "throughput_img_s"] if keys else []
        page = sorted(lines, key=lambda line: keys.index(_key(line)))
    else:
        lines = _lines(store, scope, query.figure)
        if query.status:
            lines = [line for line in lines if line["status"] == query.status]
        if query.order == "key":
            lines.sort(key=_key_order)
        page, total = lines[query.offset : query.offset + query.limit], len(lines)
    end = query.offset + len(page)
    return {
        "total": total,
        "limit": query.limit,
        "offset": query.offset,
        "next_offset": end if end < total else None,
        "series": [{k: v for k, v in line.items() if k != "spark"} | {"recent": line["spark"]} for line in page],
    }


def nodes_page(store, dags: list[str], query: NodesQuery) -> dict:
    """The overview's node lines of the readable DAGs' runs (scalewatch.web.overview.nodes_for): a node the
    newest run named (`kind` "slow") and a node that lost its ranks' cores to one process in several runs
    (`kind` "interference", with `process`, `share`, `runs` and `of`). JSON-safe: a figure a line has none
    of (NaN) is null."""
    from scalewatch.web.overview import Scope, nodes_for

    nodes = nodes_for(store, Scope(dags, query.cluster, query.workload)) if dags else []
    return {"nodes": [{k: _finite_or_none(v) for k, v in n.items()} for n in nodes]}


def _finite_or_none(value):
    import math

    return None if isinstance(value, float) and not math.isfinite(value) else value


def node_lines(user, query: NodesQuery) -> dict:
    """/api/nodes for `user`: the store and the DAGs they may read, then `nodes_page` (which a test can
    call with a real store and no Airflow login)."""
    return nodes_page(*_store_and_dags(user), query)


def series_points(user, series: str, query: PointsQuery) -> dict:
    from bench.analysis.history.overview import series_key

    try:
        key = series_key(series)
    except ValueError as error:
        raise HTTPException(status_code=400, detail=f"id: {error}") from None
    store, dags = _store_and_dags(user)
    rows = store.series_points(dags, key, POINT_COLUMNS, query.limit + 1, query.offset) if dags else None
    if rows is None or (rows.empty and query.offset == 0):
        raise HTTPException(status_code=404, detail="no series with this id in a DAG you may read")
    more = len(rows) > query.limit
    return {
        "id": series,
        **key,
        "limit": query.limit,
        "offset": query.offset,
        "next_offset": query.offset + query.limit if more else None,
        "points": _records(rows.head(query.limit)),
    }


def run_detail(user, run_id: str, query: RunQuery) -> dict:
    store, dags = _store_and_dags(user)
    if query.dag_id is not None:
        dags = [d for d in dags if d == query.dag_id]
    runs = store.suite_runs(dags, ids=[run_id]) if dags else None
    if runs is None or runs.empty:
        raise HTTPException(status_code=404, detail="no suite run with this id in a DAG you may read")
    rows = store.run_results(runs["dag_id"].tolist(), run_id, RUN_COLUMNS)
    out = []
    for run in runs.itertuples():  # each DAG's own rows and fingerprint: another DAG may share the run id
        mine = rows[rows["dag_id"] == run.dag_id].drop(columns=["dag_id"])
        out.append(
            {
                "dag_id": run.dag_id,
                "started_at": run.started_at,
                "cluster": run.cluster,
                "passed": None if run.passed is None else bool(run.passed),
                "environment": store.environments([run_id], dag_ids=[run.dag_id]).get(run_id, {}),
                "rows": _records(mine),
            }
        )
    return {"suite_run_id": run_id, "runs": out}


def _noise_history(store, dags: list[str], later, run_id: str) -> tuple[dict, dict]:
    """Per scale of run b (`later`): the accepted images/s of readable DAGs up to b's start (never runs
    stored since) and the regression tolerance b's config set, with its `history_runs` as the window,
    each from the config of b's run in the row's own DAG (the defaults where it set none)."""
    from bench.analysis.history.compare import SCALE
    from bench.config.models import Thresholds
    from scalewatch.web.reading import thresholds_by_dag

    configured = thresholds_by_dag(store, later["dag_id"].unique().tolist(), run_id)
    history, tolerances = {}, {}
    for dag_id, rows in later.groupby("dag_id", sort=False):
        th = configured.get(dag_id) or Thresholds()  # no run of this DAG stored: the model's defaults
        window = th.history_runs
        until = rows["started_at"].astype(str).tolist()
        values = store.history_values(rows, window, run_id, since=None, dag_ids=dags, until=until)
        for row, v in zip(rows.to_dict("records"), values, strict=True):
            key = tuple(int(row[k]) if k == "gpus" else row[k] for k in SCALE)
            history[key] = list(reversed(v))  # oldest first, as the floor reads it
            tolerances[key] = th.regression_tolerance
    return history, tolerances


def compare(user, query: CompareQuery) -> dict:
    """Run a against run b (each of a DAG the user may read); see bench.analysis.history.compare. Every
    figure shown comes from readable DAGs' rows only: the runs' rows, the history that sizes each scale's
    noise tolerance and interval, and each run's fingerprint (that of the DAGs whose rows it shows)."""
    from bench.analysis.history.compare import COLUMNS, compare_runs

    store, dags = _store_and_dags(user)
    frames = {}
    for name, run_id in (("a", query.a), ("b", query.b)):
        frame = store.run_results(dags, run_id, COLUMNS) if dags else None
        if frame is None or frame.empty:
            raise HTTPException(status_code=404, detail=f"{name}: no suite run {run_id!r} in a DAG you may read")
        frames[name] = frame
    history, tolerances = _noise_history(store, dags, frames["b"], query.b)
    env = {
        name: store.environments([run_id], dag_ids=frames[name]["dag_id"].unique().tolist()).get(run_id)
        for name, run_id in (("a", query.a), ("b", query.b))
    }
    result = compare_runs(frames["a"], frames["b"], env["a"], env["b"], history, tolerances)
    started = {name: str(frame["started_at"].iloc[0]) for name, frame in frames.items()}
    return {
        "a": {"suite_run_id": query.a, "started_at": started["a"]},
        "b": {"suite_run_id": query.b, "started_at": started["b"]},
    } | result


@router.get("/api/series")
async def api_series(request: Request, user: User) -> dict:
    """The overview's lines, worst first, one page of them; filterable by cluster, workload, status."""
    return await run_in_threadpool(series_page, user, parse_query(SeriesQuery, request))


@router.get("/api/nodes")
async def api_nodes(request: Request, user: User) -> dict:
    """The overview's node lines: slow nodes and nodes whose cores a process took in several runs."""
    return await run_in_threadpool(node_lines, user, parse_query(NodesQuery, request))


@router.get("/api/series/{series}/points")
async def api_points(series: str, request: Request, user: User) -> dict:
    """One series' stored runs, newest first, one page of them."""
    return await run_in_threadpool(series_points, user, series, parse_query(PointsQuery, request))


@router.get("/api/runs/{run_id}")
async def api_run(run_id: str, request: Request, user: User) -> dict:
    """One suite run: its verdict, environment fingerprint and rows (per DAG that has a run of this id)."""
    return await run_in_threadpool(run_detail, user, run_id, parse_query(RunQuery, request))


@router.get("/api/compare")
async def api_compare(request: Request, user: User) -> dict:
    """Two suite runs compared per scale (?a=<older suite run id>&b=<newer>)."""
    return await run_in_threadpool(compare, user, parse_query(CompareQuery, request))
