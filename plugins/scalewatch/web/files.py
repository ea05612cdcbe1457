"""Which files of a run folder are web content, and opening them without leaving the folder.

Only what a report needs is served: the report page, the results CSV and the Data Docs site. Run
specs, handles, state files, rank logs and metrics stay on disk for the suite and the task logs.
Any path trick (`..`, an encoded slash, an absolute path, a symlink anywhere on the way) is a 404.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

RUN_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
SEGMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,254}$")
TOP_LEVEL = {"report.html", "results.csv"}
DATA_DOCS = "data-docs"
DATA_DOCS_SUFFIXES = {".html", ".css", ".js", ".json", ".png", ".svg", ".ico", ".woff", ".woff2", ".ttf", ".map"}
SUITE_FILE = "suite.json"  # {"dag_id", "run_id"}: which DAG's permission guards this run's pages


class NotServed(Exception):
    """The path is not web content of this run (or does not exist): always answered 404."""


def run_dir(root: Path, run: str) -> Path:
    if not RUN_DIR_RE.fullmatch(run) or ".." in run:
        raise NotServed(run)
    path = root / run
    _no_links(root, path)
    if not path.is_dir():
        raise NotServed(run)
    return path


def served_file(root: Path, run: str, rel: str) -> Path:
    """The file to send, or NotServed: whitelisted names only, no link followed, never outside the run."""
    base = run_dir(root, run)
    parts = rel.split("/")
    if not parts or any(not SEGMENT_RE.fullmatch(p) or ".." in p for p in parts):
        raise NotServed(rel)
    if len(parts) == 1:
        if parts[0] not in TOP_LEVEL:
            raise NotServed(rel)
    elif parts[0] != DATA_DOCS or Path(parts[-1]).suffix.lower() not in DATA_DOCS_SUFFIXES:
        raise NotServed(rel)
    target = base.joinpath(*parts)
    _no_links(base, target)
    if not stat.S_ISREG(os.lstat(target).st_mode):
        raise NotServed(rel)
    return target


def _no_links(root: Path, target: Path) -> None:
    """Every component from root (exclusive) to target (inclusive) exists and is not a symlink."""
    current = root
    for part in target.relative_to(root).parts:
        current = current / part
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                raise NotServed(str(target))
        except FileNotFoundError:
            raise NotServed(str(target)) from None


def suite_of(run_path: Path) -> dict:
    """The DAG and run that produced this folder; a run made outside Airflow (bench sweep) has none."""
    try:
        doc = json.loads((run_path / SUITE_FILE).read_text())
        return doc if isinstance(doc, dict) else {}
    except (OSError, json.JSONDecodeError):
        return {}
