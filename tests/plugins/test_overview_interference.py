"""A node whose ranks lose their cores to the same process in several runs shows as a node line (issue 62,
item 5): on the overview (first screen), on a series' page, in the JSON API's node lines, and in the alert;
each marked `kind` "interference" with its process, share and runs, beside the slow nodes."""

from __future__ import annotations

import json

from bench.report.history import Filters
from bench.store.db import ResultsStore
from tests.infra.history_seed import seed_many
from tests.plugins.test_overview_nodes import _overview_html

CLUSTER = "load-000"
LINE = "node gpu-07: `busy` took 30% of the ranks' cores in 3 of the last 5 runs"


def _seeded(tmp_path, noisy_weeks: tuple[int, ...]) -> ResultsStore:
    """Five weekly runs, every row measured clean; in `noisy_weeks` the ssd @ 4 GPUs row's worst rank (on
    gpu-07) lost 30% of its cores to `busy` (its per-rank figures and the row's own columns alike)."""
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    seed_many(store, 1, 5, configs=1)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE results SET foreign_cpu_share = 0.0, rank_breakdown = ?", (_ranks(None),))
        for week in noisy_weeks:
            top = f"busy (pid {700 + week}) on core 3"
            conn.exec_driver_sql(
                "UPDATE results SET rank_breakdown = ?, foreign_cpu_share = 0.30, foreign_top = ? "
                "WHERE suite_run_id = ? AND workload = 'ssd' AND gpus = 4",
                (_ranks(top), f"rank 1 on gpu-07: {top}", f"scheduled__{CLUSTER}-cfg0-{week:03d}"),
            )
    return store


def _ranks(top: str | None) -> str:
    """A row's per-rank figures: rank 1 on gpu-07 lost 30% of its cores to `top`'s process (none: clean)."""
    noisy = {"foreign_cpu_share": 0.30, "foreign_top": top} if top else {"foreign_cpu_share": 0.0, "foreign_top": None}
    return json.dumps(
        [
            {"rank": 0, "host": "gpu-01", "foreign_cpu_share": 0.0, "foreign_top": None},
            {"rank": 1, "host": "gpu-07"} | noisy,
        ]
    )


def _overview(store: ResultsStore) -> tuple[list[dict], str]:
    nodes, html = _overview_html(store)  # the overview as test_overview_nodes renders it
    return nodes, html.split('<h2 id="overview">')[1]


def test_the_overview_names_the_node_a_process_took_cores_from_in_three_of_five_runs(tmp_path):
    store = _seeded(tmp_path, (0, 2, 4))
    nodes, overview = _overview(store)
    assert [(n["kind"], n["host"], n["process"], n["runs"], n["of"]) for n in nodes] == [
        ("interference", "gpu-07", "busy", 3, 5)
    ]
    assert nodes[0]["line"] == LINE and abs(nodes[0]["share"] - 0.30) < 1e-9
    item = f'<li class="neg" data-cluster="{CLUSTER}" data-kind="interference" data-process="busy">'
    assert f"{item}[{CLUSTER}] {LINE.replace('&', '&amp;').replace(chr(39), '&#39;')}</li>" in overview


def test_two_runs_of_five_leave_the_overview_without_node_lines(tmp_path):
    nodes, overview = _overview(_seeded(tmp_path, (1, 3)))
    assert nodes == [] and "overview-nodes" not in overview


def test_the_api_serves_the_node_lines_json_safe_and_only_of_readable_dags(tmp_path):
    from scalewatch.web.api import NodesQuery, nodes_page

    store = _seeded(tmp_path, (0, 2, 4))
    with store.engine.begin() as conn:  # the newest run also named a slow node: its line has no gap figure
        conn.exec_driver_sql(
            "UPDATE results SET slow_node = 'gpu-02' WHERE suite_run_id = ? AND workload = 'ssd' AND gpus = 4",
            (f"scheduled__{CLUSTER}-cfg0-004",),
        )
    body = nodes_page(store, store.dag_ids(), NodesQuery())
    json.dumps(body, allow_nan=False)  # what the route's JSONResponse does: a NaN would be a 500
    slow, noisy = body["nodes"]
    assert (slow["kind"], slow["host"], slow["behind_min"]) == ("slow", "gpu-02", None)
    assert {k: noisy[k] for k in ("kind", "host", "process", "runs", "of", "line")} == {
        "kind": "interference",
        "host": "gpu-07",
        "process": "busy",
        "runs": 3,
        "of": 5,
        "line": LINE,
    }
    assert nodes_page(store, store.dag_ids(), NodesQuery(cluster="elsewhere")) == {"nodes": []}
    assert nodes_page(store, [], NodesQuery()) == {"nodes": []}  # a user who may read no DAG


def test_a_series_page_lists_it_under_nodes(tmp_path, monkeypatch):
    from scalewatch.web.app import _series_charts

    monkeypatch.setenv("SCALEWATCH_OUTPUT_DIR", str(tmp_path / "runs"))
    store = _seeded(tmp_path, (0, 2, 4))
    charts = _series_charts(store, store.dag_ids(), Filters(CLUSTER, "ssd", "cfg0", 4))
    assert [(n["kind"], n["line"]) for n in charts["nodes"]] == [("interference", LINE)]


def test_the_alert_lists_it_and_a_passing_week_sends_it():
    from scalewatch.notifiers.message import alert_text, node_news

    noisy = [{"kind": "interference", "host": "gpu-07", "process": "busy", "line": LINE}]
    failing = alert_text(
        "run-9", [], None, inconclusive=[{"workload": "ssd", "gpus": 4, "reason": "x"}], interfering=noisy
    )
    assert f"• {LINE}" in failing.splitlines()
    links = ("/w/report.html", None, None)
    ((subject, text),) = node_news("gpu-a", "run-9", [], noisy, links)
    assert subject == "scalewatch: node interference on gpu-a (run-9)" and f"• {LINE}" in text.splitlines()
    ((subject, _),) = node_news("gpu-a", "run-9", ["gpu-02 slowest in 3 of the last 5 runs"], noisy, links)
    assert subject == "scalewatch: slow node(s) and node interference on gpu-a (run-9)"
    ((subject, text),) = node_news("gpu-a", "run-9", ["gpu-02 slowest in 3 of the last 5 runs"], [], links)
    assert subject == "scalewatch: slow node(s) on gpu-a (run-9)" and "slow node(s) on cluster gpu-a" in text
    assert node_news("gpu-a", "run-9", [], [], links) == []


def test_the_node_api_is_behind_the_login_and_refuses_a_bad_filter_naming_it():
    """The route answers only a logged-in user (the same dependency as /api/series); its filters are the
    series' (a cluster name the suite could not have given is refused, naming the field)."""
    import pytest
    from fastapi.testclient import TestClient

    from bench.config.types import parse
    from bench.errors import ConfigError
    from scalewatch.web.api import NodesQuery
    from scalewatch.web.app import app

    anonymous = TestClient(app).get("/api/nodes", headers={"Accept": "application/json"})
    assert anonymous.status_code == 401
    with pytest.raises(ConfigError, match=r"^cluster: "):
        parse(NodesQuery, {"cluster": "no such/cluster"})
    with pytest.raises(ConfigError, match=r"limit"):
        parse(NodesQuery, {"limit": "5"})  # no paging: an unknown parameter, as everywhere in the API
