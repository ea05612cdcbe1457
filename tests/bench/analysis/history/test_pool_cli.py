"""`bench detect --online --pool cluster` (issue 63), run as a real process on a history CSV drawn with a
fixed seed: the contract's cluster object, the per-series changes (watch ones marked, those the cluster
change covers folded into it), and what a cluster too small to pool says."""

import json

import numpy as np
import pandas as pd

from tests.bench.analysis.test_cli_contracts import run

CONTRACT = {
    "cluster",
    "status",
    "shared_drop",
    "ci_low",
    "ci_high",
    "series_moved",
    "series_total",
    "kind",
    "detected_at",
}


def history(tmp_path, drop: float = 0.03, weeks: int = 60, at: int = 56):
    """Cluster `alpha`: ssd and retinanet-b200 at 1 and 2 GPUs (1% own noise, 0.5% shared), all `drop`
    lower from week `at`; cluster `beta`: two series only; one series of alpha with four runs."""
    rng = np.random.default_rng(6340)
    stamps = pd.date_range("2025-01-06", periods=weeks, freq="W-MON", tz="UTC")
    rows = []
    for cluster, size in (("alpha", 4), ("beta", 2)):
        shared = rng.normal(0, 0.005, weeks)
        for s in range(size):
            model, gpus = ("ssd", "retinanet-b200")[s % 2], (1, 2)[s // 2]
            values = rng.uniform(100, 5000) * np.exp(rng.normal(0, 0.01, weeks) + shared)
            if cluster == "alpha":
                values[at:] *= 1 - drop
            # the scales of one run start hours apart: still one run of the cluster
            rows += [
                {"timestamp": (t + pd.Timedelta(hours=2 * s)).isoformat(), "model": model, "gpus": gpus}
                | {"throughput_img_s": v, "cluster": cluster}
                for t, v in zip(stamps, values, strict=True)
            ]
    rows += [
        {"timestamp": t.isoformat(), "model": "new", "gpus": 4, "throughput_img_s": 50.0, "cluster": "alpha"}
        for t in stamps[-4:]
    ]
    path = tmp_path / "history.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_a_shared_drop_is_one_cluster_change_with_the_contract_and_the_series_folded_into_it(tmp_path):
    done = run(
        "detect", str(history(tmp_path)), "--metric", "throughput_img_s", "--json", "--online", "--pool", "cluster"
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    (change,) = out["clusters"]
    assert set(change) >= CONTRACT
    assert change["cluster"] == "alpha" and change["status"] == "change" and change["scope"] == "cluster"
    assert change["ci_low"] < 0.03 < change["ci_high"] and change["ci_low"] > 0
    assert (change["series_moved"], change["series_total"]) == (4, 4)
    assert sorted(change["moved"]) == [
        "retinanet-b200 @ 1 GPUs",
        "retinanet-b200 @ 2 GPUs",
        "ssd @ 1 GPUs",
        "ssd @ 2 GPUs",
    ]
    assert change["kind"] in ("compute-bound", "communication")
    assert change["changed_at"].startswith("2026-02-0") and change["detected_at"] > change["changed_at"]
    alpha = [c for c in out["change_points"] if c["cluster"] == "alpha"]
    assert alpha and not any(c["alerted"] for c in alpha if c["timestamp"] >= "2026-01")  # one alert: the cluster's
    assert {"watch", "change"} >= {c["status"] for c in out["change_points"]}
    notes = {(n["cluster"], n["note"]) for n in out["notes"]}
    assert ("beta", "2 series with history, 3 needed: nothing pooled") in notes
    assert ("alpha", "left out (too little history): new @ 4 GPUs") in notes


def test_a_quiet_cluster_has_no_change_and_the_text_says_what_moved(tmp_path):
    quiet = history(tmp_path, drop=0.0)
    done = run("detect", str(quiet), "--metric", "throughput_img_s", "--json", "--online", "--pool", "cluster")
    assert done.returncode == 0, done.stderr
    assert [c for c in json.loads(done.stdout)["clusters"] if c["status"] == "change"] == []
    text = run("detect", str(history(tmp_path)), "--metric", "throughput_img_s", "--online", "--pool", "cluster")
    assert "[alpha] change: shared drop" in text.stdout and "4 of 4 series moved" in text.stdout
    assert "[beta] 2 series with history, 3 needed: nothing pooled" in text.stdout


def test_pool_needs_online_and_a_cluster_column(tmp_path):
    path = history(tmp_path)
    done = run("detect", str(path), "--metric", "throughput_img_s", "--pool", "cluster")
    assert done.returncode == 2 and "--pool cluster: needs --online" in done.stderr
    pd.read_csv(path).drop(columns="cluster").to_csv(path, index=False)
    done = run("detect", str(path), "--metric", "throughput_img_s", "--online", "--pool", "cluster")
    assert done.returncode == 2 and "needs a 'cluster' column" in done.stderr
