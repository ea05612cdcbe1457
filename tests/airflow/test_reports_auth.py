"""Every scalewatch page is behind Airflow's login and the DAG's read permission; only report content is served."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.airflow.conftest import NOBODY_PASSWORD, login

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
    page.wait_for_timeout(1000)
    frame = page.frame_locator("iframe").first if page.locator("iframe").count() else page
    frame.get_by_role("link", name="all reports").first.click()
    frame.get_by_role("link", name="report", exact=True).first.click()
    page.wait_for_timeout(1000)
    texts = [page.content()] + [f.content() for f in page.frames]
    assert any("scalewatch suite run: PASSED" in t for t in texts)
