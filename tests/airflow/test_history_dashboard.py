"""The history dashboard behind Airflow's login, in real Chromium, over a store seeded with a year of runs:
the overview (first screen), its filter, a series' charts, two runs compared, annotations by an editor and
a viewer, and the JSON API over HTTP with the real login (a user without read on the DAG gets no rows)."""

from __future__ import annotations

import re

import httpx
import pandas as pd
import pytest
import sqlalchemy as sa

from bench.store.db import ResultsStore
from tests.airflow.conftest import NOBODY_PASSWORD, VIEWER_PASSWORD, login, view_showing
from tests.infra.history_seed import CONFIG, CONFIG_KEY, WEEKS, seed_checkpoints, seed_many, seed_year

pytestmark = pytest.mark.slow
CLUSTER = "history-test"
PAGE = f"/scalewatch/reports/history?cluster={CLUSTER}"
OVERVIEW = "/scalewatch/reports/history"
API = "/scalewatch/reports/api"
# seed_many's clusters (its prefix, then -000): 20 series, ssd @ 4 GPUs 30% slower in its latest run; 10 series
# whose latest run is five weeks old
RECENT, STALE = "overview-000", "overview-stale-000"
FINGERPRINT = {"driver": "550.54", "cuda": "12.4", "nccl": "2.21.5", "kernel": "6.1.0"}


@pytest.fixture(scope="module")
def seeded(running_airflow):
    (running_airflow.home / "sw" / "runs").mkdir(parents=True, exist_ok=True)
    url = running_airflow.env.get("SCALEWATCH_RESULTS_URL") or f"sqlite:///{running_airflow.home}/sw/results.db"
    store = ResultsStore(url)
    results = seed_year(store, running_airflow.home / "sw" / "runs", CLUSTER)
    seed_many(store, 1, 12, prefix="overview", drop=("ssd", 4))
    old = pd.Timestamp.now(tz="UTC").floor("D") - pd.Timedelta(weeks=5)
    seed_many(store, 1, 12, configs=1, prefix="overview-stale", end=old)
    return store, results


def _checkpoints(store) -> None:
    """Checkpoint figures on the recent cluster's ssd @ 4 GPUs (both configs), its latest write 40% slower:
    set by the tests that read them, after the downgrade test (stored figures keep it from running)."""
    assert seed_checkpoints(store, RECENT, "ssd", 4) == 2 * 12


def _fingerprints(store) -> None:
    """The environments of the drop's run and the run before it (stored by the tests that read them: a
    stored fingerprint keeps the migration test's downgrade from running, rightly)."""
    store.upsert_environment("scaling_regression", f"scheduled__{CLUSTER}-035", FINGERPRINT)
    store.upsert_environment("scaling_regression", f"scheduled__{CLUSTER}-036", FINGERPRINT | {"nccl": "2.23.4"})


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
    rows = page.locator("table.runs tr")
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
    assert view.locator("table.overview tr.line").count() >= 2  # the overview first, no chart of every series


# Columns added after 0007 that the seeded history fills (the downgrade guard refuses to drop values).
NEWER_THAN_0007 = {
    "change_alerts": ("drop_ci_low", "drop_ci_high", "confirmed_runs"),
    "results": ("noise_cv", "drop_ci_low", "drop_ci_high", "node_figures", "slow_node"),
}


def test_the_page_never_migrates_a_store_and_says_when_it_is_not_at_head(running_airflow, seeded):
    """The web server reads the store read-only: a store at 0007 is refused with a message and left at 0007."""
    from alembic import command

    from bench.store.migrate import SCHEMA_REVISION, alembic_config

    store, _ = seeded
    with store.migration_connection() as conn:
        # the downgrade refuses to drop columns that hold values (nothing stored is lost by a migration):
        # the seeded history's noise-model figures (0020) are cleared first, as its message says to
        for table, columns in NEWER_THAN_0007.items():
            conn.execute(sa.text(f"UPDATE {table} SET " + ", ".join(f"{c} = NULL" for c in columns)))
        command.downgrade(alembic_config(conn), "0007")
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


def test_the_overview_comes_first_worst_first_and_its_filter_and_links_work(running_airflow, seeded, page):
    """Chromium: one line per series with the contract's figures, worst first (the 30% drop is `regressed`,
    the five-week-old cluster `stale`), a roll-up line per cluster, the "needs attention" filter, and a
    line that opens its series' charts."""
    _checkpoints(seeded[0])
    login(page, running_airflow.url)
    page.goto(running_airflow.url + OVERVIEW)
    lines = page.locator("table.overview tr.line")
    statuses = [lines.nth(i).get_attribute("data-status") for i in range(lines.count())]
    assert lines.count() == 2 + 20 + 10  # history-test's two series, the recent cluster's 20, the stale one's 10
    order = ("regressed", "inconclusive", "change", "stale", "annotated", "ok")
    assert statuses == sorted(statuses, key=order.index)  # worst first
    first = lines.first
    assert statuses[:2] == ["regressed", "regressed"]  # ssd @ 4 GPUs in both configs of the recent cluster
    assert "ssd @ 4 GPUs" in first.inner_text() and first.get_attribute("data-cluster") == RECENT
    assert "outside noise" in first.locator("td.delta-baseline").inner_text()
    assert first.locator("svg.spark polyline").count() == 1
    stale = [
        s
        for s, c in zip(
            statuses, [lines.nth(i).get_attribute("data-cluster") for i in range(lines.count())], strict=True
        )
        if c == STALE
    ]
    assert stale == ["stale"] * 10
    rollup = page.locator("ul.rollup li")
    assert (
        rollup.count() == 3 and "worst regressed" in page.locator(f'ul.rollup li[data-cluster="{RECENT}"]').inner_text()
    )
    ckpt = page.locator("table.checkpoints tr.line")  # ssd @ 4 GPUs' write and read lines, in both configs
    assert [(ckpt.nth(i).get_attribute("data-figure"), ckpt.nth(i).get_attribute("data-status")) for i in range(4)] == [
        ("ckpt_write_mb_s", "regressed"),
        ("ckpt_write_mb_s", "regressed"),
        ("ckpt_read_mb_s", "ok"),
        ("ckpt_read_mb_s", "ok"),
    ]
    assert ckpt.count() == 4 and "checkpoint write" in ckpt.first.inner_text()
    assert "MB/s" in ckpt.first.locator("td.latest").inner_text() and ckpt.first.locator("svg.spark").count() == 1
    assert "outside noise" in ckpt.first.locator("td.delta-baseline").inner_text()
    page.locator("a.attention").click()
    page.wait_for_load_state()
    shown = page.locator("table.overview tr.line")
    kept = [shown.nth(i).get_attribute("data-status") for i in range(shown.count())]
    assert kept == [s for s in statuses if s in ("regressed", "inconclusive", "change", "stale")] and "ok" not in kept
    assert page.locator("table.checkpoints tr.line").count() == 2  # the regressed writes need attention
    shown.first.locator("a.series").click()
    page.wait_for_load_state()
    panels = page.locator("section.panel")
    assert panels.count() == 1 and panels.first.get_attribute("data-series") == f"{RECENT}/ssd/4/cfg0"
    assert panels.first.locator("figure svg").count() == 4  # the charts of the figures it has: checkpoints, no reads


def test_two_runs_compared_per_scale_with_intervals_noise_and_environment(running_airflow, seeded, page):
    """Chromium: the runs table's "with the run before" link of the drop's run, then the form: the 2-GPU
    scale's 12% drop is outside noise, the 1-GPU scale's wobble is not, and the NCCL change is named."""
    _fingerprints(seeded[0])
    login(page, running_airflow.url)
    page.goto(running_airflow.url + PAGE)
    page.locator(f'a.compare[href*="b=scheduled__{CLUSTER}-036"]').click()
    page.wait_for_load_state()
    assert page.locator("input[name=a]").input_value() == f"scheduled__{CLUSTER}-035"
    drop = page.locator('tr.scale[data-gpus="2"][data-figure="throughput_img_s"]')
    assert drop.get_attribute("data-outside") == "yes" and "-1" in drop.inner_text()
    assert page.locator('tr.scale[data-gpus="1"][data-figure="throughput_img_s"]').get_attribute("data-outside") == "no"
    assert "nccl: 2.21.5 → 2.23.4" in page.locator(".env").inner_text()
    page.locator("input[name=a]").fill(f"scheduled__{CLUSTER}-000")
    page.locator("input[name=b]").fill("no-such-run")
    page.locator("button[type=submit]").click()
    page.wait_for_load_state()
    assert (
        "b: no suite run &#39;no-such-run&#39;" in page.content() or "b: no suite run 'no-such-run'" in page.content()
    )


def _api(af, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token or af.token}", "Accept": "application/json"}
    return httpx.get(af.url + API + path, headers=headers, timeout=30)


def _compared_as_of_b(results: pd.DataFrame, a: int, b: int) -> list[dict]:
    """/api/compare's scales for weeks a and b of the year, worked out here: the noise history of each
    scale is its 8 newest accepted runs up to b's start (the seed's history_runs), at its 10% tolerance."""
    import json

    from bench.analysis.history.compare import compare_runs

    run = {week: results[results["suite_run_id"] == f"scheduled__{CLUSTER}-{week:03d}"] for week in (a, b)}
    at = run[b]["started_at"].iloc[0]
    before = results[results["accepted"].astype(bool) & (results["started_at"] < at)].sort_values("started_at")
    keys = {g: (CLUSTER, "ssd", g, CONFIG_KEY) for g in (1, 2)}
    history = {keys[g]: before[before["gpus"] == g]["throughput_img_s"].tail(8).tolist() for g in keys}
    tolerance = CONFIG["bounds"]["regression_tolerance"]
    expected = compare_runs(run[a], run[b], None, None, history, dict.fromkeys(keys.values(), tolerance))
    return json.loads(json.dumps(expected["scales"]))


def test_the_json_api_pages_filters_validates_and_checks_read_access(running_airflow, seeded):
    from bench.analysis.history.overview import series_id

    af = running_airflow
    _fingerprints(seeded[0])
    first = _api(af, "/series?limit=5&order=worst")
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["total"] == 32 and len(body["series"]) == 5 and body["next_offset"] == 5
    row = body["series"][0]
    assert {"status", "latest_efficiency", "latest_img_s", "delta_prev", "delta_baseline", "outside_noise"} <= set(row)
    assert row["status"] == "regressed" and row["outside_noise"]["delta_baseline"] is True
    by_key = [_api(af, f"/series?limit=5&offset={at}").json() for at in (0, 5)]  # paged in SQL, in key order
    assert by_key[0]["total"] == 32 and by_key[1]["next_offset"] == 10
    keys = [(r["cluster"], r["workload"], r["gpus"], r["config_key"]) for page in by_key for r in page["series"]]
    assert len(set(keys)) == 10 and keys[:5] == sorted(keys[:5])  # the pages do not overlap
    _checkpoints(seeded[0])
    writes = _api(af, "/series?figure=ckpt_write_mb_s").json()["series"]  # the checkpoint lines, by figure
    assert [(r["figure"], r["status"], r["gpus"]) for r in writes] == [("ckpt_write_mb_s", "regressed", 4)] * 2
    assert writes[0]["outside_noise"]["delta_baseline"] is True and writes[0]["latest_img_s"] is None
    every = [r["figure"] for r in _api(af, "/series?figure=all&order=worst&limit=500").json()["series"]]
    assert every.count("throughput_img_s") == 32 and every.count("ckpt_read_mb_s") == 2
    assert every[0] == "ckpt_write_mb_s"  # 40% under its baseline: the worst line of all
    stale = _api(af, f"/series?status=stale&cluster={STALE}&limit=500").json()
    assert stale["total"] == 10 and {r["cluster"] for r in stale["series"]} == {STALE}
    points = _api(af, f"/series/{row['id']}/points?limit=4").json()
    assert len(points["points"]) == 4 and points["points"][0]["throughput_img_s"] == row["latest_img_s"]
    run = _api(af, f"/runs/scheduled__{CLUSTER}-036").json()
    assert run["runs"][0]["environment"]["nccl"] == "2.23.4" and len(run["runs"][0]["rows"]) == 2
    compared = _api(af, f"/compare?a=scheduled__{CLUSTER}-035&b=scheduled__{CLUSTER}-036").json()
    assert compared["environment_changes"] == [{"field": "nccl", "before": "2.21.5", "after": "2.23.4"}]
    assert compared["scales"] == _compared_as_of_b(seeded[1], 35, 36)  # no run stored after b sizes its noise
    huge = series_id(CLUSTER, "ssd", 10**30, CONFIG_KEY)  # a 500 on SQLite before it was bounded
    for path, field in (
        ("/series?limit=0", "limit"),
        ("/series?status=broken", "status"),
        ("/series?figure=img_s", "figure"),
        ("/series?colour=red", "colour"),
        ("/series/not-an-id/points", "id"),
        ("/compare?a=x", "b"),
        (f"/series/{huge}/points", "gpus"),
        (f"/series/{series_id(CLUSTER, 'ssd', 0, CONFIG_KEY)}/points", "gpus"),
    ):
        bad = _api(af, path)
        assert bad.status_code == 400 and field in bad.json()["detail"], (path, bad.text)
    assert "'ok'" in _api(af, "/series?status=broken").json()["detail"]  # the allowed values are named
    anonymous = httpx.get(af.url + API + "/series", headers={"Accept": "application/json"}, timeout=30)
    assert anonymous.status_code == 401
    nobody = af.token_for("nobody", NOBODY_PASSWORD)  # may read no DAG: no row of scaling_regression's runs
    assert _api(af, "/series", nobody).json() == {
        "total": 0,
        "limit": 50,
        "offset": 0,
        "next_offset": None,
        "series": [],
    }
    for path in (
        f"/series/{row['id']}/points",
        f"/runs/scheduled__{CLUSTER}-036",
        f"/compare?a=scheduled__{CLUSTER}-035&b=scheduled__{CLUSTER}-036",
    ):
        refused = _api(af, path, nobody)
        assert refused.status_code == 404 and CLUSTER not in refused.text.replace(f"scheduled__{CLUSTER}", ""), path
    viewer = af.token_for("viewer", VIEWER_PASSWORD)  # reads every DAG: the same rows as the admin
    assert _api(af, "/series?limit=5&order=worst", viewer).json()["series"] == body["series"]


def test_an_annotation_in_chromium_as_a_viewer_is_refused_and_as_an_editor_is_shown(running_airflow, seeded, page):
    """The viewer (reads every DAG, may change none) submits the dashboard's form and is refused, nothing
    stored; the admin submits the same form and the series' change point shows the note."""
    store, _ = seeded
    af = running_airflow
    before = len(store.annotation_history(CLUSTER))
    note = "storage node swapped: the drop is explained"
    for user, password, status in (("viewer", VIEWER_PASSWORD, 403), ("admin", None, 303)):
        login(page, af.url, user, password) if password else login(page, af.url)
        page.goto(af.url + PAGE + "&gpus=2")
        form = page.locator("form.annotate").last
        form.locator("select[name=kind]").select_option("explained")
        form.locator("input[name=note]").fill(note)
        with page.expect_response(lambda r: r.url.endswith("/scalewatch/reports/annotations")) as answer:
            form.locator("button[type=submit]").click()
        assert answer.value.status == status, user
        page.wait_for_load_state()
        page.context.clear_cookies()
        if user == "viewer":
            assert len(store.annotation_history(CLUSTER)) == before
    assert len(store.annotation_history(CLUSTER)) == before + 1
    assert store.annotation_history(CLUSTER)["author"].iloc[-1] == "admin"
    login(page, af.url)
    page.goto(af.url + PAGE + "&gpus=2")
    assert note in page.locator("ul.changes").inner_text()


# A second DAG that shares suite run ids (and the series) with scaling_regression; it belongs to team
# "hidden" (its bundle's team, as Airflow keeps it), so the running Airflow's viewer, in no team, may read
# scaling_regression but not it, and the admin reads both.
DAG, HIDDEN, SHARED = "scaling_regression", "hidden_suite", "shared-id-test"
SHARED_WEEKS = 10
READABLE_ENV, HIDDEN_ENV = {"nccl": "2.21.5"}, {"nccl": "9.9.9", "hidden_field": "hidden-value"}


def _hidden_team(af, up: bool) -> None:
    """Give hidden_suite to team "hidden" in the running Airflow's metadata database (or take it back),
    through Airflow's own models: in this process, not a second interpreter that imports Airflow again."""
    import sqlalchemy as sa
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team
    from airflow.models.team import dag_bundle_team_association_table as link
    from sqlalchemy.orm import Session

    url = af.env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or f"sqlite:///{af.home}/airflow.db"
    engine = sa.create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
    try:
        with Session(engine) as session, session.begin():
            if up:
                team, bundle = Team(name="hidden"), DagBundleModel(name="hidden-bundle")
                bundle.teams.append(team)
                session.add_all([team, bundle])
                session.flush()
                session.add(DagModel(dag_id=HIDDEN, bundle_name="hidden-bundle", fileloc="/suites/hidden.py"))
            else:
                session.execute(sa.delete(DagModel).where(DagModel.dag_id == HIDDEN))
                session.execute(sa.delete(link).where(link.c.team_name == "hidden"))
                session.execute(sa.delete(DagBundleModel).where(DagBundleModel.name == "hidden-bundle"))
                session.execute(sa.delete(Team).where(Team.name == "hidden"))
    finally:
        engine.dispose()


def _forget_shared(store) -> None:
    from bench.store.tables import (
        change_alerts_table,
        probes_table,
        results_table,
        run_environment_table,
        suite_runs_table,
    )

    with store.engine.begin() as conn:
        for table in (results_table, suite_runs_table, run_environment_table, probes_table):
            conn.execute(table.delete().where(table.c.suite_run_id.like("manual__shared-%")))
        conn.execute(change_alerts_table.delete().where(change_alerts_table.c.cluster == SHARED))


@pytest.fixture(scope="module")
def shared_ids(running_airflow, seeded):
    """Ten weekly runs of SHARED by scaling_regression (steady) and, under the same suite run ids, by
    hidden_suite (wild figures, another fingerprint, and the storage probe of the newest id)."""
    import json

    from tests.infra.history_seed import _rows

    store, _ = seeded
    _hidden_team(running_airflow, up=True)  # before any page looks hidden_suite's team up
    start = pd.Timestamp.now(tz="UTC").floor("D") - pd.Timedelta(weeks=SHARED_WEEKS)
    steady = []
    for week in range(SHARED_WEEKS):
        suite, started = f"manual__shared-{week:03d}", (start + pd.Timedelta(weeks=week)).isoformat()
        for dag, thr1 in ((DAG, 100.0 + 0.3 * (-1) ** week), (HIDDEN, 60.0 if week % 2 else 150.0)):
            frame = _rows(suite, started, SHARED, thr1, 1.9 * thr1, True, "pass")
            run = {"suite_run_id": suite, "started_at": started, "cluster": SHARED, "passed": True}
            store.upsert(frame, run | {"report_path": "", "config": json.dumps(CONFIG), "dag_id": dag})
        steady.append(100.0 + 0.3 * (-1) ** week)
        if week >= SHARED_WEEKS - 2:
            store.upsert_environment(DAG, suite, READABLE_ENV)
            store.upsert_environment(HIDDEN, suite, HIDDEN_ENV if week % 2 else READABLE_ENV)
    # a run of hidden_suite alone, between the last two weeks, and a change point of the shared series found
    # at it: a status derived from hidden_suite's rows only, which the viewer must not see
    alone = (start + pd.Timedelta(weeks=SHARED_WEEKS - 1.5)).isoformat()
    frame = _rows("manual__shared-hidden", alone, SHARED, 130.0, 247.0, True, "pass")
    run = {"suite_run_id": "manual__shared-hidden", "started_at": alone, "cluster": SHARED, "passed": True}
    store.upsert(frame, run | {"report_path": "", "config": json.dumps(CONFIG), "dag_id": HIDDEN})
    key = {"cluster": SHARED, "workload": "ssd", "gpus": 1, "config_key": CONFIG_KEY, "metric": "throughput_img_s"}
    found = {"changed_in": "manual__shared-hidden", "detected_at": alone, "detected_in": "manual__shared-hidden"}
    figures = {"before": 100.0, "after": 130.0, "change": 0.3, "pvalue": 0.001, "size": 0.3, "state": "pending"}
    store.upsert_change(key | {"changed_at": alone} | found | figures)
    store.upsert_probe(
        {"suite_run_id": suite, "cluster": SHARED, "probed_at": started, "paths": ["/hidden/ceiling-probe"]}
        | {"ceiling_mb_s": 900.0, "conclusive": True, "reason": "", "method": "fio", "block_size": 1 << 20}
        | {"sample_bytes": 1e9, "levels": [], "accepted": True}
    )
    yield store, steady
    _forget_shared(store)
    _hidden_team(running_airflow, up=False)


def test_a_run_id_shared_with_an_unreadable_dag_shows_only_the_readable_dags_data(running_airflow, shared_ids):
    """The viewer reads scaling_regression, not hidden_suite, and both hold runs of the same suite run ids on
    one series: /api/runs, /api/compare (its noise tolerance, intervals and environment), the points, the
    overview's ceiling lines, the series page and the compare page show nothing of hidden_suite's rows,
    fingerprint or probe; the admin, who reads both, sees them (what the viewer is spared is there)."""
    import json

    from bench.analysis.history.compare import compare_runs
    from bench.analysis.history.overview import series_id
    from bench.config.defaults import DEFAULT_REGRESSION_TOLERANCE

    af, (store, steady) = running_airflow, shared_ids
    viewer, nobody = af.token_for("viewer", VIEWER_PASSWORD), af.token_for("nobody", NOBODY_PASSWORD)
    a, b = f"manual__shared-{SHARED_WEEKS - 2:03d}", f"manual__shared-{SHARED_WEEKS - 1:03d}"
    seen = _api(af, f"/runs/{b}", viewer).json()["runs"]
    assert [r["dag_id"] for r in seen] == [DAG] and seen[0]["environment"] == READABLE_ENV
    assert [r["throughput_img_s"] for r in seen[0]["rows"]] == pytest.approx([steady[-1], 1.9 * steady[-1]])
    both = {r["dag_id"]: r["environment"] for r in _api(af, f"/runs/{b}").json()["runs"]}
    assert both == {DAG: READABLE_ENV, HIDDEN: HIDDEN_ENV}  # each DAG its own fingerprint, even for the admin
    assert _api(af, f"/runs/{b}", nobody).status_code == 404
    compared = _api(af, f"/compare?a={a}&b={b}", viewer).json()
    mine = store.frame(sa_where(DAG))
    expected = compare_runs(
        mine[mine["suite_run_id"] == a],
        mine[mine["suite_run_id"] == b],
        READABLE_ENV,
        READABLE_ENV,
        {(SHARED, "ssd", g, CONFIG_KEY): [f * v for v in reversed(steady[:-1])][:8] for g, f in ((1, 1.0), (2, 1.9))},
        {(SHARED, "ssd", g, CONFIG_KEY): DEFAULT_REGRESSION_TOLERANCE for g in (1, 2)},  # b's config: the default
    )
    assert compared["environment_changes"] == [] and compared["scales"] == json.loads(json.dumps(expected["scales"]))
    assert _api(af, f"/compare?a={a}&b={b}").json()["scales"] != compared["scales"]  # the wild runs widen it
    status = {
        who: {r["gpus"]: r["status"] for r in _api(af, f"/series?cluster={SHARED}", token).json()["series"]}
        for who, token in (("viewer", viewer), ("admin", None))
    }
    assert status["viewer"] == {1: "ok", 2: "ok"} and status["admin"][1] == "change"  # hidden_suite's change
    points = _api(af, f"/series/{series_id(SHARED, 'ssd', 1, CONFIG_KEY)}/points?limit=500", viewer).json()
    assert {p["dag_id"] for p in points["points"]} == {DAG} and len(points["points"]) == SHARED_WEEKS
    headers = {"Authorization": f"Bearer {viewer}"}
    for path in (f"/history?cluster={SHARED}", f"/compare?a={a}&b={b}"):
        page = httpx.get(af.url + "/scalewatch/reports" + path, headers=headers, timeout=30)
        assert page.status_code == 200 and SHARED in page.text, path
        for hidden in ("9.9.9", "hidden-value", "/hidden/ceiling-probe"):
            assert hidden not in page.text, (path, hidden)
    admin = af.get(f"/scalewatch/reports/history?cluster={SHARED}").text
    assert "hidden-value" in admin and "/hidden/ceiling-probe" in admin


def sa_where(dag_id: str):
    import sqlalchemy as sa

    from bench.store.tables import results_table

    return sa.and_(results_table.c.dag_id == dag_id, results_table.c.cluster == SHARED)
