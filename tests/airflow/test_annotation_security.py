"""POST /annotations on the running Airflow: only from this site's pages, a bounded body, edit access to
every DAG whose runs hold the series, one answer for a missing and a forbidden change point, and never a
store file created. And the report server serves no script (a real Data Docs site in Chromium).

A second DAG ("blue_suite") runs the annotated series too; it belongs to team "blue" (its bundle's team, as
Airflow keeps it), so a user of no team may edit scaling_regression but not it: Airflow's SimpleAuthManager
then judges the two DAGs differently, as Airflow's own DAG routes do.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import httpx
import pytest

from bench.results.schema import CHANGE_KEY
from bench.store.db import ResultsStore
from tests.airflow.conftest import VIEWER_PASSWORD, login
from tests.infra.history_seed import CONFIG, _rows, seed_year

pytestmark = pytest.mark.slow
CLUSTER = "annotate-test"
BLUE = "blue_suite"
PATH = "/scalewatch/reports/annotations"
CONN_ID = "scalewatch_results"  # scalewatch.paths.results_url: the connection wins over the default store
NOTE = {"kind": "explained", "note": "storage firmware 2.1: the drop is the new cache policy"}

TEAM_UP = """
from airflow.models.dag import DagModel
from airflow.models.dagbundle import DagBundleModel
from airflow.models.team import Team
from airflow.utils.session import create_session

with create_session() as session:
    team = Team(name="blue")
    bundle = DagBundleModel(name="blue-bundle")
    bundle.teams.append(team)
    session.add_all([team, bundle])
    session.flush()
    session.add(DagModel(dag_id="blue_suite", bundle_name="blue-bundle", fileloc="/suites/blue.py"))
"""
TEAM_DOWN = """
from sqlalchemy import delete

from airflow.models.dag import DagModel
from airflow.models.dagbundle import DagBundleModel
from airflow.models.team import Team, dag_bundle_team_association_table as link
from airflow.utils.session import create_session

with create_session() as session:
    session.execute(delete(DagModel).where(DagModel.dag_id == "blue_suite"))
    session.execute(delete(link).where(link.c.team_name == "blue"))
    session.execute(delete(DagBundleModel).where(DagBundleModel.name == "blue-bundle"))
    session.execute(delete(Team).where(Team.name == "blue"))
"""
# A user with the "user" role (may edit DAGs) in no team: its token as the auth manager itself issues it
# (the running Airflow's user list has no such user; the token carries role and teams).
TEAMLESS_TOKEN = """
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

print(SimpleAuthManager().generate_jwt(SimpleAuthManagerUser(username="alice", role="user", teams=[])))
"""


def _in_airflow(af, code: str) -> str:
    """Run `code` with the running Airflow's own configuration (its metadata database, its JWT secret)."""
    done = subprocess.run([sys.executable, "-c", code], env=af.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def _name_store(af, path) -> None:
    """Point the running Airflow's results store at `path`, through the connection it reads per request."""
    _drop_store_name(af)
    made = af.post("/api/v2/connections", {"connection_id": CONN_ID, "conn_type": "sqlite", "host": str(path)})
    assert made.status_code == 201, made.text


def _drop_store_name(af) -> None:
    httpx.delete(f"{af.url}/api/v2/connections/{CONN_ID}", headers=af.headers(), timeout=30)


def _key(row) -> dict:
    return {k: int(row[k]) if k == "gpus" else str(row[k]) for k in CHANGE_KEY}


@pytest.fixture(scope="module")
def blue_team(running_airflow):
    _in_airflow(running_airflow, TEAM_UP)  # before any page looks blue_suite's team up (Airflow caches it)
    yield
    _in_airflow(running_airflow, TEAM_DOWN)


@pytest.fixture(scope="module")
def store_path(running_airflow, tmp_path_factory):
    """This module's own results store, named to the running Airflow for the module's length: its
    annotations and second DAG never reach the store the other modules share (one of them downgrades it,
    which refuses to drop annotations)."""
    path = tmp_path_factory.mktemp("annotate-store") / "results.db"
    _name_store(running_airflow, path)
    yield path
    _drop_store_name(running_airflow)


@pytest.fixture(scope="module")
def seeded(running_airflow, blue_team, store_path, tmp_path_factory):
    """A year of scaling_regression runs (a change point on 2 GPUs), the 2-GPU series also run once by
    blue_suite, and a change point on the 1-GPU series, which scaling_regression alone runs."""
    store = ResultsStore(f"sqlite:///{store_path}")
    seed_year(store, tmp_path_factory.mktemp("annotate-runs"), CLUSTER)
    point = store.change_alerts(CLUSTER).iloc[0]
    assert int(point["gpus"]) == 2
    suite = f"{BLUE}.manual__2026-12-08T03:00:00+00:00"
    frame = _rows(suite, "2026-12-08T03:00:00+00:00", CLUSTER, 100.0, 168.0, True, "pass")
    store.upsert(
        frame[frame["gpus"] == 2],
        {"suite_run_id": suite, "started_at": "2026-12-08T03:00:00+00:00", "cluster": CLUSTER, "passed": True}
        | {"report_path": "", "config": json.dumps(CONFIG), "dag_id": BLUE},
    )
    solo = {k: v.item() if hasattr(v, "item") else v for k, v in point.items()} | {"gpus": 1}
    store.upsert_change(solo)
    return store, _key(point), _key(solo)


def _post(af, body: dict, token: str | None = None, **headers: str) -> httpx.Response:
    """JSON over REST with a bearer token (the admin's unless given), plus any browser-like headers."""
    auth = {"Authorization": f"Bearer {token or af.token}"}
    return httpx.post(af.url + PATH, json=body, headers=auth | headers, timeout=30)


def test_a_cross_site_request_is_refused_and_stores_nothing(running_airflow, seeded):
    """The session cookie rides along with a cross-site form or fetch; only this site's pages may use it."""
    store, key, _ = seeded
    af = running_airflow
    cookie = {"Cookie": f"_token={af.token}"}  # the UI's session cookie, as a browser would attach it
    for headers in (
        {"Origin": "http://evil.example"},
        {"Referer": "http://evil.example/attack.html"},
        {},  # neither header: no browser sends a POST so, and no REST client without its token
        {"Origin": "null"},  # a sandboxed frame or a data: URL
        {"Origin": f"http://127.0.0.1:{af.port + 1}"},  # another port of this host: same site, not this origin
    ):
        answer = httpx.post(af.url + PATH, json=key | NOTE, headers=headers | cookie, timeout=30)
        assert answer.status_code == 403 and "cross-site" in answer.text, (headers, answer.status_code, answer.text)
    with_token = _post(af, key | NOTE, Origin="http://evil.example")  # a token does not make a bad Origin good
    assert with_token.status_code == 403
    assert store.annotations(CLUSTER).empty


def test_a_page_on_another_origin_cannot_annotate_in_the_readers_name(running_airflow, seeded, page):
    """Real Chromium, logged in: a page served from another port of this host (same site, so the Lax
    session cookie is sent) submits the annotation form to Airflow's origin."""
    store, key, _ = seeded
    af = running_airflow
    login(page, af.url)
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in (key | NOTE).items())
    attack = f"http://127.0.0.1:{af.port + 1}/attack.html"
    page.route(
        attack,
        lambda route: route.fulfill(
            content_type="text/html",
            body=f'<form method="post" action="{af.url}{PATH}">{inputs}</form>'
            "<script>document.forms[0].submit()</script>",
        ),
    )
    with page.expect_response(lambda r: r.url == af.url + PATH) as answer:
        page.goto(attack)
    assert answer.value.status == 403
    assert store.annotations(CLUSTER).empty


def test_a_body_over_16_kib_is_refused_unread(running_airflow, seeded):
    _, key, _ = seeded
    af = running_airflow
    large = key | NOTE | {"padding": "x" * (17 * 1024)}
    declared = _post(af, large)
    assert declared.status_code == 413, declared.text

    def chunks():  # no Content-Length: the server must stop reading on its own
        data = json.dumps(large).encode()
        for i in range(0, len(data), 1024):
            yield data[i : i + 1024]

    headers = {"Authorization": f"Bearer {af.token}", "Content-Type": "application/json"}
    streamed = httpx.post(af.url + PATH, content=chunks(), headers=headers, timeout=30)
    assert streamed.status_code == 413, streamed.text


def test_a_missing_and_a_forbidden_change_point_get_the_same_answer(running_airflow, seeded):
    store, key, _ = seeded
    af = running_airflow
    viewer = af.token_for("viewer", VIEWER_PASSWORD)
    forbidden = _post(af, key | NOTE, viewer)
    for missing in ({"cluster": "no-such-cluster"}, {"changed_at": "1999-01-01"}, {"gpus": 4096}):
        answer = _post(af, key | NOTE | missing, viewer)
        assert (answer.status_code, answer.text) == (forbidden.status_code, forbidden.text) == (403, answer.text)
    assert "no-such-cluster" not in forbidden.text and BLUE not in forbidden.text  # no DAG or key named
    # no run holds the series: refused alike even to the admin; a missing point of a series it may edit: 404
    assert _post(af, key | NOTE | {"cluster": "no-such-cluster"}).status_code == 403
    assert _post(af, key | NOTE | {"changed_at": "1999-01-01"}).status_code == 404
    assert store.annotations(CLUSTER).empty


def test_annotating_needs_edit_access_to_every_dag_that_runs_the_series(running_airflow, seeded):
    """A user who may edit scaling_regression (where the change happened) but not blue_suite (which runs the
    same series): the annotation would re-baseline blue_suite's series too, so it is refused."""
    store, key, solo = seeded
    af = running_airflow
    teamless = _in_airflow(af, TEAMLESS_TOKEN).splitlines()[-1]  # after any warning Airflow prints
    refused = _post(af, key | NOTE, teamless)
    assert refused.status_code == 403, refused.text
    assert store.annotations(CLUSTER).empty
    allowed = _post(af, solo | NOTE, teamless)  # a series scaling_regression alone runs: allowed
    assert allowed.status_code == 201, allowed.text
    assert allowed.json()["author"] == "alice" and allowed.json()["dag_id"] == "scaling_regression"
    stored = store.annotations(CLUSTER)
    assert stored["gpus"].tolist() == [1] and stored["author"].tolist() == ["alice"]


def test_no_store_file_is_created_by_an_annotation(running_airflow, seeded, store_path, tmp_path):
    """The results store named by the Airflow connection does not exist yet: refused, and still absent."""
    af = running_airflow
    _, key, _ = seeded
    absent = tmp_path / "absent" / "results.db"
    absent.parent.mkdir()
    _name_store(af, absent)
    try:
        page = af.get(f"/scalewatch/reports/history?cluster={CLUSTER}")
        assert page.status_code == 503 and "does not exist yet" in page.text  # the connection is in effect
        viewer = af.token_for("viewer", VIEWER_PASSWORD)
        for token in (None, viewer):
            answer = _post(af, key | NOTE, token)
            assert answer.status_code == 503, answer.text
            assert not absent.exists() and list(absent.parent.iterdir()) == []
    finally:
        _name_store(af, store_path)
    assert af.get(f"/scalewatch/reports/history?cluster={CLUSTER}").status_code == 200


def test_the_dashboards_form_still_annotates_in_chromium(running_airflow, seeded, page):
    """The same-origin form: Chromium sends Origin, the body is a URL-encoded form under the cap."""
    store, key, _ = seeded
    af = running_airflow
    login(page, af.url)
    page.goto(f"{af.url}/scalewatch/reports/history?cluster={CLUSTER}")
    form = page.locator(f'section.panel[data-series$="/{key["gpus"]}/{key["config_key"]}"] form.annotate').first
    form.locator("select[name=kind]").select_option("expected")
    form.locator("input[name=note]").fill("new storage firmware: slower is expected")
    with page.expect_response(lambda r: r.url == af.url + PATH) as answer:
        form.locator("button[type=submit]").click()
    assert answer.value.status == 303
    page.wait_for_load_state()
    assert "new storage firmware: slower is expected" in page.content()
    stored = store.annotations(CLUSTER)
    mine = stored[stored["gpus"] == key["gpus"]]
    assert mine["author"].tolist() == ["admin"] and mine["dag_id"].tolist() == ["scaling_regression"]


def test_a_real_data_docs_site_loads_no_script_and_none_is_served(running_airflow, page):
    """Great Expectations' own pages, made offline as the suite makes them, opened through the report
    server in Chromium: every file they load is served, none of it a script; a bundled .js is a 404."""
    af = running_airflow
    folder = af.home / "sw" / "runs" / "manual__2026-12-09T03-00-00-00-00"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        _open_data_docs(af, page, folder)
    finally:
        shutil.rmtree(folder)  # the other modules' listings stay as they were


def _open_data_docs(af, page, folder) -> None:
    """Build the site in `folder` (GX, then made offline), open each page, check what was loaded."""
    from bench.analysis.verdict.expectations import prepare, validate
    from bench.config.models import Thresholds

    (folder / "suite.json").write_text(json.dumps({"dag_id": "scaling_regression", "run_id": folder.name}))
    frame = _rows("dd", "2026-12-09T03:00:00+00:00", CLUSTER, 100.0, 150.0, False, "fail").assign(baseline_gpus=1)
    validate(prepare(frame, Thresholds()), Thresholds(), folder / "data-docs")
    pages = sorted(p.relative_to(folder).as_posix() for p in (folder / "data-docs").rglob("*.html"))
    pages = [p for p in pages if "/vendor/" not in p]
    assert len(pages) >= 3
    login(page, af.url)
    loaded: dict[str, int] = {}
    page.on("response", lambda r: loaded.__setitem__(r.url, r.status) if "/scalewatch/reports/" in r.url else None)
    base = f"{af.url}/scalewatch/reports/{folder.name}/"
    for rel in pages:
        page.goto(base + rel)
        page.wait_for_load_state("load")
    assert any(u.endswith("bootstrap/bootstrap.min.css") for u in loaded), loaded
    assert {u: s for u, s in loaded.items() if s != 200} == {}
    assert not [u for u in loaded if u.split("?")[0].endswith((".js", ".json", ".map"))], loaded
    scripts = sorted((folder / "data-docs").rglob("*.js"))
    assert scripts  # the site bundles them (its pages name them in <script> tags)
    for script in scripts[:3]:
        rel = script.relative_to(folder).as_posix()
        assert af.get(f"/scalewatch/reports/{folder.name}/{rel}").status_code == 404, rel
