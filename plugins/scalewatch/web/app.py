"""The FastAPI app the plugin mounts at /scalewatch/reports: a list of runs and each run's report files.

Every route depends on `current_user` (Airflow's JWT) and checks read access to the run's DAG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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
