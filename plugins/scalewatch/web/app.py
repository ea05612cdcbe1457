"""The FastAPI app the plugin mounts at /scalewatch/reports: the history dashboard, a list of runs and
each run's report files.

Every route depends on `current_user` (Airflow's JWT) and checks read access to the run's DAG. Every
response says nosniff and no-store; served files carry a sandboxing CSP (`files.headers_for`), the
app's own pages one that allows their inline styles and SVG only. The pages read the results store
through one read-only engine per URL: they never migrate it and never need write access to it. The one
route that writes (`POST /annotations`) takes requests from this site's pages only, a bounded body, and
opens the store for writing only after the permission check passed on a store that exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qsl, quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import Field, field_validator
from starlette.concurrency import run_in_threadpool

from bench.config.types import Frozen
from scalewatch.paths import reports_root
from scalewatch.web.api import router as api_router
from scalewatch.web.auth import (
    LoginRedirect,
    current_user,
    may_edit_all,
    may_read_dag,
    require_dag,
    require_same_origin,
)
from scalewatch.web.files import (
    BASE_HEADERS,
    DescriptorResponse,
    NotServed,
    check_path,
    is_served,
    open_in,
    reports,
    run_folder,
    suite_of,
)
from scalewatch.web.reading import read_store, readable_dags

app = FastAPI(title="scalewatch reports", docs_url=None, redoc_url=None, openapi_url=None)
User = Annotated[object, Depends(current_user)]
templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")), autoescape=select_autoescape(["html"])
)
PAGE_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'self'"
)
# What the history page shows of each results row: the series key, the run, its verdict and the figures.
HISTORY_COLUMNS = (
    "dag_id",
    "suite_run_id",
    "cluster",
    "workload",
    "gpus",
    "config_key",
    "started_at",
    "run_type",
    "accepted",
    "verdict",
    "bandwidth_valid",
    "throughput_img_s",
    "scaling_efficiency",
    "avg_read_mb_s",
    "peak_read_mb_s",
    "ckpt_write_mb_s",
    "ckpt_read_mb_s",
    "rank_breakdown",
)
# An annotation is a change point's key, a kind and a note of at most 2000 characters: a form or JSON of
# one is far under this. A larger body is refused unread (413), never buffered whole.
ANNOTATION_BODY_MAX = 16 * 1024
FORM_TYPE = "application/x-www-form-urlencoded"
JSON_TYPE = "application/json"
# One answer for a change point that does not exist and one the user may not annotate (no existence leak).
NOT_YOURS = (
    "no change point with this key that you may annotate: it needs edit access to every DAG whose runs hold its series"
)


@app.middleware("http")
async def _headers(request: Request, call_next):
    response = await call_next(request)
    for name, value in BASE_HEADERS.items():
        response.headers[name] = value
    response.headers.setdefault("Content-Security-Policy", PAGE_CSP)
    return response


@app.exception_handler(LoginRedirect)
async def _to_login(_request: Request, exc: LoginRedirect) -> RedirectResponse:
    return RedirectResponse(exc.location, status_code=303)


def _not_found() -> HTTPException:
    return HTTPException(status_code=404, detail="no such report file")


def _run_link(dag_id: str | None, run_id: str | None) -> str | None:
    """The run's page in Airflow's UI: always a path on this origin, each part one segment. `run_id` is the
    suite run's identity (`<dag_id>.<Airflow run_id>`, bench.suite.plan) or, for older runs, Airflow's own."""
    from bench.suite.plan import airflow_run_id

    if not (dag_id and run_id):
        return None
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(airflow_run_id(dag_id, run_id), safe='')}"


@app.get("/", response_class=HTMLResponse)
def index(user: User) -> str:
    """Links are built from the run folder's real name; suite.json only says who may read it."""
    runs = []
    readable: dict[str | None, bool] = {}  # one check per DAG, not per run folder
    for folder, _mtime, suite in sorted(reports(reports_root()), key=lambda r: r[1], reverse=True):
        if suite["dag_id"] not in readable:
            readable[suite["dag_id"]] = may_read_dag(user, suite["dag_id"])
        if readable[suite["dag_id"]]:
            runs.append(
                {
                    "folder": folder,
                    "label": suite["run_id"] or folder,
                    "dag_id": suite["dag_id"],
                    "run_link": _run_link(suite["dag_id"], suite["run_id"]),
                    "verdict": suite["verdict"],
                }
            )
    return templates.get_template("index.html").render(runs=runs)


def _read_store(url: str):
    """One read-only store per URL for the process's life (scalewatch.web.reading)."""
    return read_store(url)


class PageQuery(Frozen):
    """The history page's query: the series filters (a series' charts) and the overview's filter."""

    cluster: str | None = Field(None, max_length=64)
    workload: str | None = Field(None, max_length=64)
    config: str | None = Field(None, max_length=128)
    gpus: int | None = Field(None, ge=1, le=4096)
    attention: bool = False

    @field_validator("cluster", "workload", "config", "gpus", mode="before")
    @classmethod
    def _blank(cls, value):
        return None if value == "" else value


def _history_page(user, query: PageQuery) -> HTMLResponse:
    """The overview of every series the user may read (first screen), then the charts and runs of the
    series the filters pick (only when they pick some: never every row of the store)."""
    from bench.errors import ConfigError
    from bench.report.history import Filters, UnknownFilter, check_filters, options
    from scalewatch.paths import results_url
    from scalewatch.web.overview import Scope, ceilings_for, lines_for, nodes_for, page_context

    filters = Filters(query.cluster, query.workload, query.config, query.gpus)
    empty = {"cluster": [], "workload": [], "config_key": []}

    def page(status: int, error: str | None, opts: dict, overview: dict | None = None, **charts) -> HTMLResponse:
        html = templates.get_template("history.html").render(
            error=error,
            filters=filters,
            options=opts,
            overview=overview,
            panels=charts.get("panels", []),
            runs=charts.get("runs", []),
            nodes=charts.get("nodes", []),
            picked=filters.picked(),
        )
        return HTMLResponse(html, status_code=status)

    try:
        store = _read_store(results_url())
    except ConfigError as error:  # no store yet, or one not at this code's schema: said, never migrated here
        return page(503, str(error), empty)
    readable = readable_dags(user, store)
    series = store.series_options(readable)
    try:
        check_filters(filters, series)
    except UnknownFilter as error:
        return page(400, str(error), options(series))
    scope = Scope(readable, filters.cluster, filters.workload, filters.config_key, filters.gpus)
    overview = page_context(
        lines_for(store, scope), ceilings_for(store, scope), query.attention, nodes_for(store, scope)
    )
    charts = _series_charts(store, readable, filters) if filters.picked() else {}
    return page(200, None, options(series), overview, **charts)


@app.get("/history", response_class=HTMLResponse)
async def history(request: Request, user: User) -> HTMLResponse:
    """The place to watch the suite: the overview first, then trends per series with bounds, band and
    change points, and the runs."""
    return await run_in_threadpool(_history_page, user, _page_query(PageQuery, request))


def _page_query(model, request: Request):
    from scalewatch.web.api import parse_query

    return parse_query(model, request)


def _series_charts(store, readable: list[str], filters) -> dict:
    """The picked series' charts, change points and runs: the newest SERIES_PAGE_RUNS runs of each, and
    only the suite runs and environments those rows name; and the node lines read from their ranks: the
    slowest node of several runs, and the node that lost its cores to one process in several (issue 62)."""
    from markupsafe import Markup

    from bench.analysis.history.interference import interfering_nodes
    from bench.analysis.history.node_health import slow_nodes
    from bench.report.history import SERIES_PAGE_RUNS, runs_table, series_panels

    results = store.results_of(
        readable,
        HISTORY_COLUMNS,
        newest=SERIES_PAGE_RUNS,
        cluster=filters.cluster,
        workload=filters.workload,
        config_key=filters.config_key,
        gpus=filters.gpus,
    )
    ids = results["suite_run_id"].astype(str).unique().tolist()
    allowed = store.suite_runs(readable, ids=ids)
    changes = store.change_alerts(filters.cluster, readable)  # not one found in a hidden DAG's runs alone
    root = reports_root()

    def report_link(path: str | None) -> str | None:
        if not path:
            return None
        folder = Path(path).parent.name
        return f"{folder}/report.html" if is_served(root, folder, "report.html") else None

    environments = store.environments(ids, dag_ids=readable)  # not another DAG's run of a shared id
    panels = series_panels(results, allowed, changes, filters, store.annotations(filters.cluster), environments)
    for panel in panels:
        panel["charts"] = [Markup(c) for c in panel["charts"]]
    runs = runs_table(results, allowed, filters, report_link, _run_link, environments)
    return {"panels": panels, "runs": runs, "nodes": slow_nodes(results) + interfering_nodes(results)}


def _compare_page(user, request: Request) -> HTMLResponse:
    from scalewatch.web.api import CompareQuery, compare

    params = request.query_params
    picked = {k: params.get(k, "") for k in ("a", "b")}
    result, error, status = None, None, 200
    if params.get("a") or params.get("b"):
        try:
            result = compare(user, _page_query(CompareQuery, request))
        except HTTPException as refused:
            error, status = str(refused.detail), refused.status_code
    html = templates.get_template("compare.html").render(picked=picked, result=result, error=error)
    return HTMLResponse(html, status_code=status)


@app.get("/compare", response_class=HTMLResponse)
async def compare_page(request: Request, user: User) -> HTMLResponse:
    """Two suite runs side by side: per scale the changes with 95% intervals, which are outside noise, and
    what changed in the environment fingerprint."""
    return await run_in_threadpool(_compare_page, user, request)


async def _capped_body(request: Request) -> bytes:
    """The request body, refused (413) past ANNOTATION_BODY_MAX whether or not a Content-Length says so."""
    too_large = HTTPException(status_code=413, detail=f"body over {ANNOTATION_BODY_MAX} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > ANNOTATION_BODY_MAX:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > ANNOTATION_BODY_MAX:
            raise too_large
    return bytes(body)


def _fields(content_type: str, body: bytes) -> dict:
    """The submitted fields: a JSON object (REST) or the dashboard's URL-encoded form; 400 or 415 else."""
    media = content_type.split(";")[0].strip().lower()
    try:
        if media == JSON_TYPE:
            doc = json.loads(body)
        elif media == FORM_TYPE:
            doc = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=32))
        else:
            raise HTTPException(status_code=415, detail=f"body must be {JSON_TYPE} or {FORM_TYPE}")
    except (ValueError, UnicodeDecodeError):
        raise HTTPException(status_code=400, detail="body must be JSON or a form") from None
    if not isinstance(doc, dict):
        raise HTTPException(status_code=400, detail="body must be an object of annotation fields")
    return doc


def _user_name(user) -> str:
    return str(getattr(user, "get_name", lambda: "")() or getattr(user, "username", "") or "")


def _annotation_target(user, annotation, url: str) -> dict:
    """The change point to annotate, from the store opened read-only (which never creates one). Permission
    comes first: edit access to every DAG whose runs hold the series (a series no run holds is refused
    alike); then existence. Anyone without that access gets one answer whether the change point exists
    or not; 404 is said only to someone who may edit all of the series."""
    from bench.errors import ConfigError
    from bench.results.schema import CHANGE_KEY
    from bench.store.db import ResultsStore

    try:
        reader = ResultsStore.open_read_only(url)
    except ConfigError as error:  # no store yet, or one not at this code's schema: nothing opened to write
        raise HTTPException(status_code=503, detail=str(error)) from None
    try:
        key = annotation.model_dump(include=set(CHANGE_KEY))
        series = reader.dag_ids_of_series(*(key[k] for k in ("cluster", "workload", "gpus", "config_key")))
        if not series or not may_edit_all(user, series):  # no run holds it: no change point either
            raise HTTPException(status_code=403, detail=NOT_YOURS)
        point = reader.change_point(key)
    finally:
        reader.engine.dispose()
    if point is None:  # told only to someone who may edit every DAG whose runs hold the series
        raise HTTPException(status_code=404, detail="no such change point in the store")
    return point


def _store_annotation(user, annotation) -> dict:
    """The annotation appended under the change point's DAG, the store opened for writing only once the
    target is allowed and found; returns the stored row."""
    from sqlalchemy.exc import OperationalError

    from bench.errors import ConfigError
    from bench.store.db import ResultsStore
    from scalewatch.paths import results_url

    url = results_url()
    point = _annotation_target(user, annotation, url)
    row = annotation.model_dump() | {"author": _user_name(user), "dag_id": point.get("dag_id") or ""}
    try:
        writer = ResultsStore.open_at_head(url)
    except (ConfigError, OperationalError) as error:
        raise HTTPException(status_code=503, detail=str(error)) from None
    try:
        return writer.add_annotation(row)
    finally:
        writer.engine.dispose()


@app.post("/annotations")
async def annotate(request: Request, user: User):
    """Mark a stored change point expected or explained, with a plain-text note (the dashboard's form, or
    JSON over REST). The series then re-baselines from it in every DAG that runs it, so it needs edit
    permission on each of them. Answers 303 back to the dashboard for the form, the stored row (201) as
    JSON for REST."""
    from bench.analysis.history.annotations import Annotation
    from bench.config.types import parse
    from bench.errors import ConfigError
    from bench.results.schema import CHANGE_KEY

    require_same_origin(request)  # after the login check: an anonymous request is told 401 first
    content_type = request.headers.get("content-type", "")
    body = _fields(content_type, await _capped_body(request))
    try:
        annotation = parse(Annotation, {k: body.get(k) for k in (*CHANGE_KEY, "kind", "note")})
    except ConfigError as error:
        raise HTTPException(status_code=400, detail=str(error)) from None
    stored = await run_in_threadpool(_store_annotation, user, annotation)
    if content_type.lower().startswith(JSON_TYPE):
        return JSONResponse(stored, status_code=201)
    return RedirectResponse(f"history?cluster={quote(annotation.cluster, safe='')}", status_code=303)


app.include_router(api_router)  # before the catch-all report route below: /api/... is no run folder


@app.get("/{run}/{path:path}")
def serve(run: str, path: str, user: User) -> DescriptorResponse:
    """The file, opened once through the run folder's descriptor, after the DAG's read permission."""
    try:
        parts = check_path(path)
        with run_folder(reports_root(), run) as folder:
            require_dag(user, suite_of(folder)["dag_id"])
            return DescriptorResponse(open_in(folder, parts), parts)
    except NotServed:
        raise _not_found() from None
