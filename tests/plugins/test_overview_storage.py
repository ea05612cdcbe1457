"""The overview's cluster line names the storage under test (issue 64 item 7) as the run's report and alert
name it, `S3 (endpoint, bucket)` or `PATH on FSTYPE SOURCE`, from what the run kept with its environment:
the newest run of each series, each distinct store once; a run recorded before it was kept names none."""

from __future__ import annotations

from bench.store.db import ResultsStore
from tests.infra.history_seed import seed_many
from tests.plugins.test_overview_nodes import _overview_html


def _runs(store: ResultsStore) -> list[str]:
    with store.engine.begin() as conn:
        query = "SELECT suite_run_id FROM results GROUP BY suite_run_id ORDER BY min(started_at)"
        return [r[0] for r in conn.exec_driver_sql(query)]


def test_the_cluster_line_names_the_store_its_newest_runs_read(tmp_path):
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    seed_many(store, 1, 3, configs=1)
    _, html = _overview_html(store)
    assert "storage under test" not in html  # runs kept before the storage was: nothing invented
    runs = _runs(store)
    bucket = "S3 (http://rgw.example:7480, bench-data)"
    store.upsert_environment("scaling_regression", runs[0], {"kernel": "6.1", "storage": "/data on nfs4 nas:/x"})
    store.upsert_environment("scaling_regression", runs[-1], {"kernel": "6.1", "storage": bucket})
    _, html = _overview_html(store)
    rollup = html.split('<ul class="rollup">')[1].split("</ul>")[0]
    # the newest run's store, escaped as text; an older run's store is not the cluster's now
    assert f'<span class="storage">(storage under test: {bucket})</span>' in rollup, rollup
    assert "nfs4" not in rollup
    # another DAG's environment of the same run id is not this page's
    store.upsert_environment("other_dag", runs[-1], {"storage": "<script>x</script>"})
    _, html = _overview_html(store)
    assert "<script>x" not in html and bucket in html
