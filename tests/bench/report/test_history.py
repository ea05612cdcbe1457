"""The dashboard's content from a store seeded with a year of weekly runs: points, band, bound, change points."""

import re

import pytest

from bench.report.history import Filters, UnknownFilter, check_filters, runs_table, series_panels
from bench.store.db import ResultsStore
from tests.infra.history_seed import DROP_WEEK, WEEKS, seed_year


def group(svg: str, gid: str) -> str:
    """The SVG of one named group (matplotlib writes an artist's gid as its group id)."""
    start = svg.index(f'<g id="{gid}">')
    end = svg.find('<g id="', start + 10)
    return svg[start : end if end > 0 else len(svg)]


def points(svg: str, gid: str = "accepted") -> int:
    return len(re.findall(r"<use xlink:href=", group(svg, gid))) if f'<g id="{gid}">' in svg else 0


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("history")
    store = ResultsStore(f"sqlite:///{tmp}/r.db")
    results = seed_year(store, tmp / "runs")
    return store, results


def test_every_accepted_run_is_a_point_and_every_other_run_is_hollow(seeded):
    store, results = seeded
    panels = series_panels(results, store.suite_runs(), store.change_alerts(), Filters(cluster="history-test"))
    assert [(p["workload"], p["gpus"]) for p in panels] == [("ssd", 1), ("ssd", 2)]
    for p in panels:
        mine = results[results["gpus"] == p["gpus"]]
        images, efficiency, avg_mb, peak_mb = p["charts"]
        assert points(images) == int(mine["accepted"].sum()) == WEEKS - 2
        assert points(images, "rejected") == 2  # the failed and the inconclusive week, drawn hollow
        assert "history band" in images and "bound" in efficiency
        assert points(avg_mb) == points(peak_mb) == WEEKS - 2


def test_the_confirmed_drop_is_drawn_and_listed_once(seeded):
    store, results = seeded
    panels = series_panels(results, store.suite_runs(), store.change_alerts(), Filters(cluster="history-test"))
    two = next(p for p in panels if p["gpus"] == 2)
    drops = [c for c in two["changes"] if c["metric"] == "images/s"]
    assert len(drops) == 1 and drops[0]["size"] == pytest.approx(-0.12, abs=0.03)
    week = sorted(results["started_at"].unique())[DROP_WEEK]
    # seeded, never sent: pending (a change point is alerted only once every target has it)
    assert drops[0]["changed_at"] == str(week)[:10] and drops[0]["state"] == "pending"
    assert 'id="change-point-0"' in two["charts"][0] and "-1" in two["charts"][0]
    one = next(p for p in panels if p["gpus"] == 1)
    assert not one["changes"] and 'id="change-point-0"' not in one["charts"][0]


def test_runs_table_links_reports_and_airflow_runs(seeded):
    store, results = seeded
    rows = runs_table(
        results,
        store.suite_runs(),
        Filters(),
        lambda p: p and "r/" + p.split("/")[-2],
        lambda d, r: f"/dags/{d}/runs/{r}",
    )
    assert len(rows) == WEEKS and rows[0]["date"] > rows[-1]["date"]
    verdicts = {r["suite_run_id"][-3:]: r["verdict"] for r in rows}
    assert verdicts["020"] == "FAILED" and verdicts["030"] == "INCONCLUSIVE" and verdicts["021"] == "PASSED"
    assert all(r["report"] and r["run"].startswith("/dags/scaling_regression/runs/") for r in rows)


def test_a_filter_the_store_does_not_have_is_refused_naming_the_choices(seeded):
    _, results = seeded
    with pytest.raises(UnknownFilter, match=r"cluster: 'nope' is not in the store \(have: history-test\)"):
        check_filters(Filters(cluster="nope"), results)


def test_the_dashboards_bound_is_the_one_the_verdict_used():
    """A per-GPU table {16: 0.9, 32: 0.8}: the verdict holds 8 GPUs to 0.9 (the smallest listed count at or
    above it) and 64 to 0.8; the dashboard drew 0.7 at 8 and 64 (it looked up the exact count only)."""
    from bench.config.models import Thresholds
    from bench.report.history import _bound

    thresholds = Thresholds(min_scaling_efficiency=0.7, min_scaling_efficiency_by_gpus={16: 0.9, 32: 0.8})
    config = {"bounds": thresholds.model_dump(mode="json")}  # as a run's config is stored (its bounds group)
    for gpus in (1, 8, 16, 24, 32, 64):
        assert _bound(config, gpus) == thresholds.scaling_bound(gpus)
    assert _bound(config, 8) == 0.9 and _bound(config, 64) == 0.8
    assert _bound({}, 8) is None


def test_checkpoint_rates_are_drawn_with_their_band_only_where_a_series_has_them(seeded):
    """The seeded year ran no checkpoint phase: four charts per series (above). Given checkpoint figures, each
    series gains a write and a read chart, accepted runs as points, with the band their regression check used."""
    store, results = seeded
    measured = results.assign(
        ckpt_write_mb_s=2 * results["throughput_img_s"], ckpt_read_mb_s=results["throughput_img_s"]
    )
    panels = series_panels(measured, store.suite_runs(), store.change_alerts(), Filters(cluster="history-test"))
    for p in panels:
        *_, write, read = p["charts"]
        assert len(p["charts"]) == 6 and "checkpoint write MB/s" in write and "checkpoint read MB/s" in read
        assert points(write) == points(read) == WEEKS - 2 and "history band" in write and "history band" in read
