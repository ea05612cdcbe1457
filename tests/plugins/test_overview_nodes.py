"""The history page's overview names a node the newest run named, at once, marked as one run (issue 49,
deliverable 5): the single-run rule and the across-runs history agree on the first screen, not only on a
series' page once someone picks one."""

from __future__ import annotations

from bench.report.history import Filters
from bench.store.db import ResultsStore
from tests.infra.history_seed import seed_many


def _overview_html(store: ResultsStore) -> tuple[list[dict], str]:
    from scalewatch.web.app import templates
    from scalewatch.web.overview import Scope, ceilings_for, lines_for, nodes_for, page_context

    scope = Scope(store.dag_ids())
    nodes = nodes_for(store, scope)
    overview = page_context(lines_for(store, scope), ceilings_for(store, scope), False, nodes)
    empty = {"cluster": [], "workload": [], "config_key": []}
    html = templates.get_template("history.html").render(
        error=None, filters=Filters(None, None, None, None), options=empty, overview=overview, picked=False
    )
    return nodes, html


def test_the_overview_lists_the_node_the_newest_run_named_marked_one_run(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    seed_many(store, 1, 4, configs=1)
    nodes, html = _overview_html(store)
    assert nodes == [] and "overview-nodes" not in html  # nobody named: no node lines
    with store.engine.begin() as conn:
        newest = conn.exec_driver_sql("SELECT max(started_at) FROM results").scalar()
        older = conn.exec_driver_sql("SELECT min(started_at) FROM results").scalar()
        conn.exec_driver_sql("UPDATE results SET slow_node = 'gpu-old' WHERE started_at = ?", (older,))
        conn.exec_driver_sql(
            "UPDATE results SET slow_node = 'gpu-07' WHERE started_at = ? AND gpus = 4 AND workload = 'ssd'",
            (newest,),
        )
    nodes, html = _overview_html(store)
    assert [n["host"] for n in nodes] == ["gpu-07"], nodes  # an older run's named node is not listed
    line = "gpu-07 stood out against its peers in the latest run (ssd @ 4 GPUs) (one run)"
    assert nodes[0]["line"] == line
    assert f'<ul class="overview-nodes"><li class="neg" data-cluster="{nodes[0]["cluster"]}">' in html
    assert line in html.split('<h2 id="overview">')[1].split("<h2>")[0]  # in the overview, before any series' page
