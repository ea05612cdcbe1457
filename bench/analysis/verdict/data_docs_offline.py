"""Great Expectations' Data Docs with their CSS, JS and fonts beside them, not on CDNs.

GX's page templates load Bootstrap, jQuery, bootstrap-table, Font Awesome and Vega from public CDNs
and its logo from S3: on a cluster without internet access the pages render unstyled and their
charts stay empty. After each build this copies the bundled files (`bench/assets/data_docs/`, fetched by
`scripts/vendor-data-docs-assets.sh` at the versions GX's templates name) into the site's
`static/vendor/` and points every page at them. A CDN URL this map does not know is left alone and
reported, so a GX upgrade that adds one shows up in the offline test instead of silently.

GX's store and this copy write wherever a path leads, links included, and a run folder may sit on
storage the nodes write: a link planted at `<run>/data-docs`, at one of its folders or at a page or
asset (`static/vendor/jquery/jquery.min.js`) made the evaluate task overwrite the link's target, a
worker file, with GX's page or jQuery. So the site is built in a private folder (`private_site`:
`tempfile.mkdtemp`, mode 0700, on the worker, where nobody else can plant anything) and then
`publish`ed into the run folder through bench.safe_fs: every name below the run folder is opened
without following a link; a link (or a file) where a folder goes is removed and a folder made in its
place, and each file is written whole and renamed over its name, replacing a link there, never
writing through it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.safe_fs import RESULTS, RefusedFile, open_dir, open_root, write_atomic

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "data_docs"  # vendored files, no module
VENDOR = Path("static") / "vendor"
# URL (query string ignored) -> file under bench/assets/data_docs (or, for "static/", the site's own files)
LOCAL = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": "bootstrap/bootstrap.min.css",
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": "bootstrap/bootstrap.min.js",
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": "popper/popper.min.js",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": "bootstrap-table/bootstrap-table.min.css",
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": "bootstrap-table/bootstrap-table.min.js",
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (
        "bootstrap-table/bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (
        "bootstrap-table/bootstrap-table-filter-control.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (
        "bootstrap-table/bootstrap-table-filter-control.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        "bootstrap-datepicker/bootstrap-datepicker.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        "bootstrap-datepicker/bootstrap-datepicker.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": "fontawesome/css/all.min.css",
    "https://cdn.jsdelivr.net/npm/vega@5": "vega/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega/vega-embed.min.js",
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "bootstrap-dark/bootstrap-prefers-dark.css"
    ),
}
SITE_FILES = {"https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png": "images/logo-long.png"}
# Tags whose resource a page loads (src of script/img, href of link), not links a reader may follow.
TAG = re.compile(r"<(?:script|img|link)\b[^>]*>", re.I)
URL = re.compile(r'\b(src|href)="(https?://[^"]+)"')
# Subresource-integrity hashes and CORS mode name the CDN's bytes and fail on file:// pages.
CDN_ONLY = re.compile(r'\s(?:integrity|crossorigin)(?:="[^"]*")?', re.I)


log = logging.getLogger(__name__)


class DataDocsAssetsMissing(RuntimeError):
    """The bundled assets are not installed: Data Docs would depend on the network."""


def make_offline(site: Path) -> list[str]:
    """Rewrite every page of the Data Docs site under `site`; returns URLs still loaded from the network."""
    if not (ASSETS / "LICENSES.md").is_file():
        raise DataDocsAssetsMissing(f"{ASSETS}: bundled Data Docs assets missing (scripts/vendor-data-docs-assets.sh)")
    shutil.copytree(ASSETS, site / VENDOR, dirs_exist_ok=True)
    remote: set[str] = set()
    for page in site.rglob("*.html"):
        if VENDOR in page.relative_to(site).parents:
            continue
        up = os.path.relpath(site, page.parent)

        def local(tag: re.Match, up: str = up) -> str:
            found = URL.search(tag.group(0))
            if found is None:
                return tag.group(0)
            key = found.group(2).split("?")[0]
            if key in LOCAL:
                path = f"{up}/{VENDOR.as_posix()}/{LOCAL[key]}"
            elif key in SITE_FILES:
                path = f"{up}/static/{SITE_FILES[key]}"
            else:
                remote.add(found.group(2))
                return tag.group(0)
            text = tag.group(0).replace(found.group(0), f'{found.group(1)}="{path}"')
            return CDN_ONLY.sub("", text)

        text = page.read_text()
        page.write_text(TAG.sub(local, text))
    return sorted(remote)


@contextlib.contextmanager
def private_site() -> Iterator[Path]:
    """A fresh folder only this user can enter (mkdtemp makes it 0700) for GX to build the site in: GX
    follows links, and nobody else can plant one here. Removed afterwards, whatever happened."""
    site = Path(tempfile.mkdtemp(prefix="scalewatch-data-docs-"))
    try:
        yield site
    finally:
        shutil.rmtree(site, ignore_errors=True)


def publish(site: Path, docs_dir: Path) -> None:
    """Copy the built `site` to `docs_dir` (`<run>/data-docs`) without following a link below the run
    folder (`docs_dir`'s parent, opened as given): planted links are replaced, their targets untouched.
    A link planted again while this runs is refused (RefusedFile, naming it), never written through."""
    docs_dir.parent.mkdir(parents=True, exist_ok=True)  # the run folder, as given (a link in it is the user's)
    with open_root(docs_dir.parent) as run_fd:
        _copy_tree(site, run_fd, docs_dir.name, docs_dir)


def _copy_tree(src: Path, parent_fd: int, name: str, path: Path) -> None:
    """`src`'s regular files and folders (the private site holds nothing else) into folder `name` of `parent_fd`."""
    fd = _own_folder(parent_fd, name, path)
    try:
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False):
                _copy_tree(Path(entry.path), fd, entry.name, path / entry.name)
            elif entry.is_file(follow_symlinks=False):
                write_atomic(fd, entry.name, Path(entry.path).read_bytes())
    finally:
        os.close(fd)


def _own_folder(parent_fd: int, name: str, path: Path) -> int:
    """Descriptor of folder `name` in `parent_fd`, made if missing. A link or a file there is removed (the
    entry itself, never what a link points at) and a folder made in its place; should one be planted
    again in between, the second open refuses it."""
    try:
        return open_dir(parent_fd, name, path, RESULTS, create=True)
    except RefusedFile as planted:
        log.warning("Data Docs: %s; removed, a folder made in its place", planted)
        os.unlink(name, dir_fd=parent_fd)
    return open_dir(parent_fd, name, path, RESULTS, create=True)
