"""A small FastAPI app mounted in the Airflow API server: lists and serves suite-run reports."""

from __future__ import annotations

from html import escape

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

from scalewatch.paths import reports_root

app = FastAPI(title="scalewatch reports")


@app.get("/", response_class=HTMLResponse)
def index() -> str:
    root = reports_root()
    runs = sorted((p.parent.name for p in root.glob("*/report.html")), reverse=True)
    items = "".join(f'<li><a href="{escape(r)}/report.html">{escape(r)}</a></li>' for r in runs)
    return f"<!doctype html><title>scalewatch reports</title><h1>scalewatch reports</h1><ul>{items or 'none yet'}</ul>"


@app.get("/{run}/{path:path}")
def serve(run: str, path: str) -> FileResponse:
    root = reports_root()
    target = (root / run / path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise HTTPException(status_code=404, detail="no such report file")
    return FileResponse(target)
