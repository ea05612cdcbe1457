"""Data Docs are never written through a link planted in the run folder (issue 61, item 4).

Someone who can write into a run folder (a node's root on shared storage) plants links where Great
Expectations' store and the offline copy of the assets write: the `data-docs` folder itself, a folder in
it, a page, the bundled jQuery. Before, the evaluate task followed them and overwrote the worker's file
(in the stack, possibly the admin's password file) with a page or with jQuery. The real suite with its
real Data Docs must leave every file outside the run folder as it was and still publish the docs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from bench.analysis.verdict.data_docs_offline import ASSETS
from bench.analysis.verdict.expectations import prepare, validate
from bench.config.models import Thresholds

SECRET = "admin:the worker's own password\n"
JQUERY = Path("static/vendor/jquery/jquery.min.js")
# Where each layout plants a link, relative to <run>/data-docs ("." the folder itself), and at what:
# "file" the worker's secret file, "folder" a worker folder holding it.
LAYOUTS = {
    "the-folder-itself-at-a-worker-folder": {".": "folder"},
    "the-folder-itself-at-a-worker-file": {".": "file"},
    "pages-assets-and-subfolders": {
        str(JQUERY): "file",
        "index.html": "file",
        "expectations": "folder",
        "validations": "file",
        "static/images": "folder",
    },
}


def scales() -> pd.DataFrame:
    """A workload at 1 and 2 GPUs, the second below its scaling bound: a failing row in the docs."""
    common = {"workload": "ssd", "state": "COMPLETED", "valid": True, "reason": "", "baseline_gpus": 1}
    common |= {"inconclusive_reason": ""}
    return pd.DataFrame(
        [
            common | {"gpus": 1, "throughput_img_s": 100.0, "scaling_efficiency": 1.0},
            common | {"gpus": 2, "throughput_img_s": 120.0, "scaling_efficiency": 0.6},
        ]
    )


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry below `folder` (the worker's side): its bytes, None for a folder."""
    return {str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes() for p in sorted(folder.rglob("*"))}


def plant(docs: Path, layout: dict[str, str], worker: Path) -> None:
    for rel, kind in layout.items():
        link = docs / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(worker / "etc" if kind == "folder" else worker / "etc" / "passwords")


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_a_planted_link_is_never_written_through_and_the_docs_are_still_published(tmp_path, layout):
    worker = tmp_path / "worker"
    (worker / "etc").mkdir(parents=True)
    (worker / "etc" / "passwords").write_text(SECRET)
    before = snapshot(worker)
    run = tmp_path / "run"
    run.mkdir()
    plant(run / "data-docs", LAYOUTS[layout], worker)
    thresholds = Thresholds(min_scaling_efficiency=0.7)

    verdict = validate(prepare(scales(), thresholds), thresholds, run / "data-docs")

    assert snapshot(worker) == before, "Data Docs were written through a planted link"
    assert not verdict.passed  # the suite itself ran as ever
    docs = run / "data-docs"
    assert verdict.data_docs == str(docs / "index.html")
    links = [str(p) for p in [docs, *docs.rglob("*")] if p.is_symlink()]
    assert links == [], "a planted link is still in the published docs"
    assert stat.S_ISREG(os.lstat(docs / "index.html").st_mode)
    assert "scaling_efficiency_checked" in (docs / "expectations" / "scaling.html").read_text()  # GX's own page
    assert (docs / JQUERY).read_bytes() == (ASSETS / "jquery" / "jquery.min.js").read_bytes()
    assert any((docs / "validations").rglob("*.html")), "the validation page is missing"
