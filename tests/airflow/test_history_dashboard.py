"""The history dashboard behind Airflow's login, in real Chromium, over a store seeded with a year of runs."""

from __future__ import annotations

import re

import httpx
import pytest

from bench.store.db import ResultsStore
from tests.airflow.conftest import NOBODY_PASSWORD, VIEWER_PASSWORD, login, view_showing
from tests.infra.history_seed import WEEKS, seed_year

pytestmark = pytest.mark.slow
CLUSTER = "history-test"
PAGE = f"/scalewatch/reports/history?cluster={CLUSTER}"


@pytest.fixture(scope="module")
def seeded(running_airflow):
    (running_airflow.home / "sw" / "runs").mkdir(parents=True, exist_ok=True)
    url = running_airflow.env.get("SCALEWATCH_RESULTS_URL") or f"sqlite:///{running_airflow.home}/sw/results.db"
    store = ResultsStore(url)
    results = seed_year(store, running_airflow.home / "sw" / "runs", CLUSTER)
    return store, results


def test_anonymous_and_unauthorised_users_see_no_history(running_airflow, seeded):
    anonymous = httpx.get(running_airflow.url + PAGE, headers={"Accept": "application/json"}, timeout=30)
    assert anonymous.status_code == 401 and CLUSTER not in anonymous.text
    browser = httpx.get(running_airflow.url + PAGE, headers={"Accept": "text/html"}, timeout=30)
    assert browser.status_code == 303 and "/auth/login" in browser.headers["location"]
    token = running_airflow.token_for("nobody", NOBODY_PASSWORD)
    nobody = httpx.get(
        running_airflow.url + "/scalewatch/reports/history", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert nobody.status_code == 200 and CLUSTER not in nobody.text  # no DAG it may read: no run shown


def test_an_unknown_filter_is_refused_naming_the_choices(running_airflow, seeded):
    bad = running_airflow.get("/scalewatch/reports/history?cluster=nope")
    assert bad.status_code == 400 and "cluster: &#39;nope&#39; is not in the store" in bad.text


def test_the_dashboard_draws_what_the_store_holds_and_its_links_open(running_airflow, seeded, page):
    store, results = seeded
    login(page, running_airflow.url)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(running_airflow.url + PAGE)
    panels = page.locator("section.panel")
    assert panels.count() == 2
    for i, gpus in enumerate((1, 2)):
        panel = panels.nth(i)
        assert f"ssd @ {gpus} GPUs" in panel.locator("h3").inner_text()
        images = panel.locator("figure").first.inner_html()
        drawn = re.search(r'<g id="accepted">(.*?)(?=<g id=")', images, re.S).group(1)
        accepted = results[(results["gpus"] == gpus) & results["accepted"].astype(bool)]
        assert len(re.findall(r"<use ", drawn)) == len(accepted) == WEEKS - 2
    drop = panels.nth(1).locator("ul.changes li").first.inner_text()
    stored = store.change_alerts()
    stored = stored[(stored["cluster"] == CLUSTER) & (stored["metric"] == "throughput_img_s")]
    assert len(stored) == 1 and f"{stored['size'].iloc[0] * 100:+.1f}%" in drop
    assert 'id="change-point-0"' in panels.nth(1).locator("figure").first.inner_html()
    rows = page.locator("table tr")
    assert rows.count() == WEEKS + 1
    assert all(u.startswith(running_airflow.url) for u in requests), [u for u in requests if "127.0.0.1" not in u]
    run_href = page.locator("a.airflow-run").first.get_attribute("href")
    assert run_href.startswith("/dags/scaling_regression/runs/scheduled__")
    page.locator("a.report").first.click()
    page.wait_for_load_state()
    newest = sorted(results["suite_run_id"].unique())[-1]
    assert f"scalewatch suite run {newest}" in page.content()


def test_the_nav_link_opens_the_dashboard(running_airflow, seeded, page):
    login(page, running_airflow.url)
    page.get_by_role("link", name="Scaling history").first.click()
    view = view_showing(page, "scalewatch: weekly history")
    assert view.get_by_role("heading", name="scalewatch: weekly history").count() == 1
    assert view.locator("section.panel").count() >= 2


def test_the_page_never_migrates_a_store_and_says_when_it_is_not_at_head(running_airflow, seeded):
    """The web server reads the store read-only: a store at 0007 is refused with a message and left at 0007."""
    from alembic import command

    from bench.store.db import SCHEMA_REVISION, _alembic_config

    store, _ = seeded
    with store.migration_connection() as conn:
        command.downgrade(_alembic_config(conn), "0007")
    try:
        refused = running_airflow.get(PAGE)
        assert refused.status_code == 503
        assert f"schema revision &#39;0007&#39;, and this scalewatch reads &#39;{SCHEMA_REVISION}&#39;" in refused.text
        assert store.schema_version() == "0007"  # the request did not migrate it
    finally:
        store.migrate()
    assert store.schema_version() == SCHEMA_REVISION
    assert running_airflow.get(PAGE).status_code == 200


def test_only_users_who_may_edit_the_dag_annotate_a_change_point_and_the_page_shows_it(running_airflow, seeded):
    store, _ = seeded
    changes = store.change_alerts(CLUSTER)
    point = changes.iloc[0]
    body = {
        k: (int(point[k]) if k == "gpus" else str(point[k]))
        for k in ("cluster", "workload", "gpus", "config_key", "metric", "changed_at")
    }
    body |= {"kind": "expected", "note": "new storage firmware: faster is right"}
    url = running_airflow.url + "/scalewatch/reports/annotations"
    anonymous = httpx.post(url, json=body, headers={"Accept": "application/json"}, timeout=30)
    assert anonymous.status_code == 401
    for user, password in (("nobody", NOBODY_PASSWORD), ("viewer", VIEWER_PASSWORD)):
        token = running_airflow.token_for(user, password)
        refused = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert refused.status_code == 403, (user, refused.text)
    assert store.annotations(CLUSTER).empty  # nothing written by the refused requests
    admin = {"Authorization": f"Bearer {running_airflow.token}"}
    for bad, status in (
        ({"note": "<script>alert(1)</script>"}, 400),
        ({"note": "x" * 2001}, 400),
        ({"kind": "ignore"}, 400),
        ({"changed_at": "1999-01-01"}, 404),
    ):
        answer = httpx.post(url, json=body | bad, headers=admin, timeout=30)
        assert answer.status_code == status, (bad, answer.text)
    made = httpx.post(url, json=body, headers=admin, timeout=30)
    assert made.status_code == 201 and made.json()["author"] == "admin", made.text
    stored = store.annotations(CLUSTER)
    assert stored["note"].tolist() == ["new storage firmware: faster is right"]
    assert stored["dag_id"].tolist() == ["scaling_regression"]  # kept: under whose permission it was made
    page = running_airflow.get(PAGE)
    assert page.status_code == 200 and "new storage firmware: faster is right" in page.text
    assert "<b>expected</b>" in page.text and "re-baselines from here" in page.text
