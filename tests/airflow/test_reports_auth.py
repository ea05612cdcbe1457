"""Every scalewatch page is behind Airflow's login and the DAG's read permission; only report content is served."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import httpx
import pytest

from tests.airflow.conftest import NOBODY_PASSWORD, login, view_showing

pytestmark = pytest.mark.slow

RUN = "manual__2026-12-01T03-00-00-00-00"
SERVED = ("report.html", "results.csv", "data-docs/index.html")
NOT_WEB_CONTENT = ("spec.json", "handle.json", "state.json", "suite.json", "ssd-1/spec.json", "ssd-1/logs/rank0.log")
SECRET_MARK = "root:x:0:0"  # /etc/passwd's first line: never in any answer


@pytest.fixture(scope="module")
def run_folder(running_airflow):
    """A run folder as the suite leaves it, plus the planted links a path trick would use."""
    root = running_airflow.home / "sw" / "runs"
    run = root / RUN
    (run / "ssd-1" / "logs").mkdir(parents=True, exist_ok=True)
    (run / "data-docs").mkdir(exist_ok=True)
    (run / "report.html").write_text("<!doctype html><title>r</title><h1>scalewatch suite run: PASSED</h1>")
    (run / "results.csv").write_text("workload,gpus,verdict\nssd,1,pass\n")
    (run / "data-docs" / "index.html").write_text("<html>data docs</html>")
    (run / "suite.json").write_text(json.dumps({"dag_id": "scaling_regression", "run_id": RUN, "verdict": "PASSED"}))
    for name in ("spec.json", "handle.json", "state.json", "ssd-1/spec.json"):
        (run / name).write_text('{"hosts": ["secret-host"], "account": "secret-account"}')
    (run / "ssd-1" / "logs" / "rank0.log").write_text("rank log")
    for link, target in (("data-docs/leak.html", "/etc/passwd"), ("passwd.html", "/etc/passwd")):
        if not os.path.lexists(run / link):
            os.symlink(target, run / link)
    if not os.path.lexists(root / "etc-link"):
        os.symlink("/etc", root / "etc-link")
    return run


def url(af, path: str) -> str:
    return f"{af.url}/scalewatch/reports/{path}"


@pytest.mark.parametrize("path", ["", *(f"{RUN}/{p}" for p in SERVED)])
def test_anonymous_requests_get_401_or_the_login_page(running_airflow, run_folder, path):
    api = httpx.get(url(running_airflow, path), headers={"Accept": "application/json"}, timeout=30)
    assert api.status_code == 401 and SECRET_MARK not in api.text
    forged = httpx.get(url(running_airflow, path), headers={"Authorization": "Bearer forged.jwt.x"}, timeout=30)
    assert forged.status_code == 401
    browser = httpx.get(url(running_airflow, path), headers={"Accept": "text/html"}, timeout=30)
    assert browser.status_code == 303
    assert "/auth/login" in browser.headers["location"] and "next=" in browser.headers["location"]


def test_an_admin_gets_report_content_and_nothing_else(running_airflow, run_folder):
    for path in SERVED:
        assert running_airflow.get(f"/scalewatch/reports/{RUN}/{path}").status_code == 200, path
    for path in NOT_WEB_CONTENT:
        response = running_airflow.get(f"/scalewatch/reports/{RUN}/{path}")
        assert response.status_code == 404, path
        assert "secret-host" not in response.text
    listing = running_airflow.get("/scalewatch/reports/")
    assert listing.status_code == 200 and f"{RUN}/report.html" in listing.text


@pytest.mark.parametrize(
    "path",
    [
        f"{RUN}/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
        f"{RUN}/%2E%2E/%2E%2E/%2E%2E/etc/passwd",
        "..%2F..%2F..%2Fetc/passwd",
        "%2Fetc/passwd",
        f"{RUN}/%2Fetc%2Fpasswd",
        f"{RUN}//etc/passwd",
        f"{RUN}/data-docs/leak.html",  # a symlink inside the run folder
        f"{RUN}/passwd.html",
        "etc-link/passwd",  # a symlinked "run folder"
        f"{RUN}/data-docs/..%2F..%2Fspec.json",
    ],
)
def test_path_tricks_are_404_and_never_serve_outside_the_report(running_airflow, run_folder, path):
    response = httpx.get(url(running_airflow, path), headers=running_airflow.headers(), timeout=30)
    assert response.status_code == 404, (path, response.status_code)
    assert SECRET_MARK not in response.text and "secret-host" not in response.text


def test_a_user_without_read_access_to_the_dag_is_refused(running_airflow, run_folder):
    token = running_airflow.token_for("nobody", NOBODY_PASSWORD)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    for path in SERVED:
        assert httpx.get(url(running_airflow, f"{RUN}/{path}"), headers=headers, timeout=30).status_code == 403
    listing = httpx.get(url(running_airflow, ""), headers=headers, timeout=30)
    assert listing.status_code == 200 and RUN not in listing.text  # the list shows only what the user may read


def test_admin_opens_the_list_from_the_nav_link_and_a_report_in_chromium(running_airflow, run_folder, page):
    login(page, running_airflow.url)
    page.get_by_role("link", name="Scaling history").first.click()
    frame = view_showing(page, "all reports")
    frame.get_by_role("link", name="all reports").first.click()
    frame.get_by_role("link", name="report", exact=True).first.click()
    assert view_showing(page, "scalewatch suite run: PASSED")


OUTSIDE_MARK = "sw-outside-secret-7f3a"  # a file outside the reports root: never in any answer


def _flip(target: Path, regular: str, link_to: Path, stop: threading.Event) -> None:
    """Swap `target` between a regular file and a symlink to `link_to`, atomically, until stopped."""
    while not stop.is_set():
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(regular)
        os.replace(tmp, target)
        lnk = target.with_name(target.name + ".lnk")
        os.symlink(link_to, lnk)
        os.replace(lnk, target)


def test_a_symlink_swapped_in_after_the_check_is_never_served(running_airflow, run_folder):
    """A file (and a folder on the way) flipped between real and a symlink to a secret while requested."""
    outside = running_airflow.home / "outside"
    (outside / "sub").mkdir(parents=True, exist_ok=True)
    (outside / "secret.html").write_text(OUTSIDE_MARK)
    (outside / "sub" / "page.html").write_text(OUTSIDE_MARK)
    docs = run_folder / "data-docs"
    real_sub = docs / "real-sub"
    real_sub.mkdir(exist_ok=True)
    (real_sub / "page.html").write_text("REGULAR")
    stop = threading.Event()

    def flip_dir() -> None:  # data-docs/sub: the real folder, then a link to the outside one
        while not stop.is_set():
            lnk = docs / "sub.lnk"
            os.symlink(real_sub, lnk)  # a link to a folder inside is refused too: no link is followed
            os.replace(lnk, docs / "sub")
            lnk2 = docs / "sub.lnk2"
            os.symlink(outside / "sub", lnk2)
            os.replace(lnk2, docs / "sub")

    threads = [
        threading.Thread(target=_flip, args=(docs / "flip.html", "REGULAR", outside / "secret.html", stop)),
        threading.Thread(target=flip_dir),
    ]
    for t in threads:
        t.start()
    seen: dict[tuple[str, int, str], int] = {}
    try:
        with httpx.Client(headers=running_airflow.headers(), timeout=30) as client:
            for i in range(600):
                path = "data-docs/flip.html" if i % 2 else "data-docs/sub/page.html"
                response = client.get(url(running_airflow, f"{RUN}/{path}"))
                assert OUTSIDE_MARK not in response.text, (i, path)
                key = (path, response.status_code, response.text[:7])
                seen[key] = seen.get(key, 0) + 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert seen.get(("data-docs/flip.html", 200, "REGULAR"), 0) > 0, seen  # the race was run: both states met
    assert seen.get(("data-docs/flip.html", 404, '{"detai'), 0) > 0, seen
    assert set(seen) <= {
        ("data-docs/flip.html", 200, "REGULAR"),
        ("data-docs/flip.html", 404, '{"detai'),
        ("data-docs/sub/page.html", 404, '{"detai'),
    }, seen


def _check_headers(response: httpx.Response, sandboxed: bool) -> None:
    assert response.headers["x-content-type-options"] == "nosniff", response.url
    assert response.headers["cache-control"] == "private, no-store", response.url
    csp = response.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp, (response.url, csp)
    sandbox = [d for d in csp.split("; ") if d.split(" ")[0] == "sandbox"]
    assert bool(sandbox) == sandboxed and "allow-scripts" not in csp, (response.url, csp)


def test_every_served_file_and_page_carries_nosniff_no_store_and_a_csp(running_airflow, run_folder):
    css = run_folder / "data-docs" / "static" / "vendor" / "site.css"
    css.parent.mkdir(parents=True, exist_ok=True)
    css.write_text("body{margin:0}")
    (run_folder / "data-docs" / "chart.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"></svg>')
    for path in (*SERVED, "data-docs/static/vendor/site.css", "data-docs/chart.svg"):
        response = running_airflow.get(f"/scalewatch/reports/{RUN}/{path}")
        assert response.status_code == 200, path
        _check_headers(response, sandboxed=True)
    report = running_airflow.get(f"/scalewatch/reports/{RUN}/report.html").headers["content-security-policy"]
    assert report.startswith("sandbox; ")  # the report is also its own opaque origin
    assert running_airflow.get(f"/scalewatch/reports/{RUN}/data-docs/chart.svg").headers["content-type"] == (
        "image/svg+xml"
    )
    for page in ("/scalewatch/reports/", "/scalewatch/reports/history", f"/scalewatch/reports/{RUN}/spec.json"):
        _check_headers(running_airflow.get(page), sandboxed=False)


def test_a_hostile_suite_json_never_reaches_the_index_links(running_airflow, run_folder):
    hostile = run_folder.parent / "manual__2026-12-03T03-00-00-00-00"
    hostile.mkdir(exist_ok=True)
    (hostile / "report.html").write_text("<title>r</title>hostile")
    (hostile / "suite.json").write_text(
        json.dumps(
            {
                "dag_id": "scaling_regression",
                "run_id": "//evil.example/y",
                "folder": "//evil.example/x",
                "verdict": "PASSED",
            }
        )
    )
    listing = running_airflow.get("/scalewatch/reports/")
    assert listing.status_code == 200
    links = re.findall(r'href="([^"]*)"', listing.text)
    assert f"{hostile.name}/report.html" in links and f"{hostile.name}/results.csv" in links
    assert not [h for h in links if h.startswith("//") or "://" in h] and "evil.example/x" not in listing.text
    assert "/dags/scaling_regression/runs/%2F%2Fevil.example%2Fy" in links  # one path segment on this origin


def test_the_report_and_data_docs_render_under_the_sandbox_in_chromium(running_airflow, run_folder, page):
    """Inline SVG and styles in the report, the bundled Data Docs CSS; a planted script never runs."""
    from bench.analysis.verdict.data_docs_offline import ASSETS
    from bench.report.plots import trend_chart

    folder = run_folder.parent / "manual__2026-12-04T03-00-00-00-00"
    (folder / "data-docs" / "static" / "vendor" / "bootstrap").mkdir(parents=True, exist_ok=True)
    (folder / "suite.json").write_text(json.dumps({"dag_id": "scaling_regression", "run_id": folder.name}))
    chart = trend_chart("ssd @ 2 GPUs: images/s", [0, 1, 2], [100.0, 120.0, 90.0], ["w1", "w2", "w3"], "images/s")
    (folder / "report.html").write_text(
        "<!doctype html><title>report</title><style>h1{color:rgb(26,127,55)}</style><h1>scalewatch suite run</h1>"
        f"<figure>{chart}</figure><script>document.title = 'pwned'</script>"
    )
    bootstrap = ASSETS / "bootstrap" / "bootstrap.min.css"
    (folder / "data-docs" / "static" / "vendor" / "bootstrap" / "bootstrap.min.css").write_bytes(bootstrap.read_bytes())
    (folder / "data-docs" / "index.html").write_text(
        '<!doctype html><html><head><link rel="stylesheet" href="static/vendor/bootstrap/bootstrap.min.css">'
        '</head><body><div class="container"><p class="text-danger">data docs</p></div></body></html>'
    )
    login(page, running_airflow.url)
    statuses: dict[str, int] = {}
    page.on("response", lambda r: statuses.__setitem__(r.url.split("/reports/")[-1], r.status))
    page.goto(f"{running_airflow.url}/scalewatch/reports/{folder.name}/report.html")
    assert page.title() == "report"  # the planted script did not run
    assert page.evaluate("getComputedStyle(document.querySelector('h1')).color") == "rgb(26, 127, 55)"
    # the report's own chart (matplotlib SVG, inline, with its <style> and style attributes) is drawn
    size = page.evaluate(
        "(() => { const b = document.querySelector('figure svg').getBoundingClientRect(); "
        "return [b.width, b.height] })()"
    )
    assert size[0] > 300 and size[1] > 150, size
    styles = page.evaluate(
        "[...document.querySelectorAll('figure svg path')].map(p => getComputedStyle(p))"
        ".map(c => [c.strokeLinejoin, c.strokeWidth])"
    )
    assert any(j == "round" for j, _ in styles)  # the SVG's <style> applies
    assert any(w == "0.8px" for _, w in styles)  # and its style attributes (default stroke width: 1px)
    page.goto(f"{running_airflow.url}/scalewatch/reports/{folder.name}/data-docs/index.html")
    page.wait_for_load_state("load")
    assert statuses.get(f"{folder.name}/data-docs/static/vendor/bootstrap/bootstrap.min.css") == 200, statuses
    assert page.evaluate("getComputedStyle(document.body).marginTop") == "0px"  # Bootstrap's reboot (8px without)
    assert page.evaluate("getComputedStyle(document.querySelector('.text-danger')).color") == "rgb(220, 53, 69)"
