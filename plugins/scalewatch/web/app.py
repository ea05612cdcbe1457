"""The FastAPI app the plugin mounts at /scalewatch/reports: the history dashboard, a list of runs and
each run's report files.

Every route depends on `current_user` (Airflow's JWT) and checks read access to the run's DAG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import quote

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from scalewatch.paths import reports_root
from scalewatch.web.auth import LoginRedirect, current_user, may_read_dag, require_dag
from scalewatch.web.files import NotServed, run_dir, served_file, suite_of

app = FastAPI(title="scalewatch reports", docs_url=None, redoc_url=None, openapi_url=None)
User = Annotated[object, Depends(current_user)]
templates = Environment(
    loader=FileSystemLoader(Path(__file__).with_name("templates")), autoescape=select_autoescape(["html"])
)


@app.exception_handler(LoginRedirect)
async def _to_login(_request: Request, exc: LoginRedirect) -> RedirectResponse:
    return RedirectResponse(exc.location, status_code=303)


def _not_found() -> HTTPException:
    return HTTPException(status_code=404, detail="no such report file")


@app.get("/", response_class=HTMLResponse)
def index(user: User) -> str:
    root = reports_root()
    runs = []
    for report in sorted(root.glob("*/report.html"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            folder = run_dir(root, report.parent.name)
            served_file(root, folder.name, "report.html")
        except NotServed:
            continue
        suite = suite_of(folder)
        if may_read_dag(user, suite.get("dag_id")):
            runs.append({"folder": folder.name, **suite})
    return templates.get_template("index.html").render(runs=runs)


@app.get("/history", response_class=HTMLResponse)
def history(
    user: User, cluster: str | None = None, workload: str | None = None, config: str | None = None
) -> HTMLResponse:
    """The place to watch the suite: trends per series with bounds, band and change points; the runs."""
    from markupsafe import Markup

    from bench.report.history import Filters, UnknownFilter, check_filters, options, runs_table, series_panels
    from bench.store.db import ResultsStore
    from scalewatch.paths import results_url

    store = ResultsStore(results_url())
    suite_runs = store.suite_runs()
    dags = [d if isinstance(d, str) and d else None for d in suite_runs["dag_id"]]
    readable = {d for d in set(dags) if may_read_dag(user, d)}  # a run made outside Airflow: DAGs in general
    allowed = suite_runs[[d in readable for d in dags]]
    results = store.frame()
    results = results[results["suite_run_id"].isin(set(allowed["suite_run_id"]))]
    changes = store.change_alerts()
    filters = Filters(cluster or None, workload or None, config or None)
    try:
        check_filters(filters, results)
    except UnknownFilter as error:
        return HTMLResponse(
            templates.get_template("history.html").render(
                error=str(error), filters=filters, options=options(results), panels=[], runs=[]
            ),
            status_code=400,
        )
    root = reports_root()

    def report_link(path: str | None) -> str | None:
        if not path:
            return None
        folder = Path(path).parent.name
        try:
            served_file(root, folder, "report.html")
        except NotServed:
            return None
        return f"{folder}/report.html"

    def run_link(dag_id: str | None, run_id: str) -> str | None:
        return f"/dags/{quote(dag_id)}/runs/{quote(run_id)}" if dag_id else None

    panels = series_panels(results, allowed, changes, filters)
    for panel in panels:
        panel["charts"] = [Markup(c) for c in panel["charts"]]
    return HTMLResponse(
        templates.get_template("history.html").render(
            error=None,
            filters=filters,
            options=options(results),
            panels=panels,
            runs=runs_table(results, allowed, filters, report_link, run_link),
        )
    )


@app.get("/{run}/{path:path}")
def serve(run: str, path: str, user: User) -> FileResponse:
    root = reports_root()
    try:
        folder = run_dir(root, run)
    except NotServed:
        raise _not_found() from None
    require_dag(user, suite_of(folder).get("dag_id"))
    try:
        target = served_file(root, run, path)
    except NotServed:
        raise _not_found() from None
    return FileResponse(target)
