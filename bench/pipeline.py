"""The suite's steps, shared by `bench sweep` and the Airflow tasks: params -> stage -> launch ->
per-rank metrics -> results frame -> expectations -> store -> report -> alert."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from bench.analysis.regression import series_floor
from bench.config import RunSpec, SweepConfig, TrainConfig
from bench.launch.base import RunResult, fetch_and_collect, launch_failed, wait

DATASET_KIND = {"ssd": "coco", "deeplabv3plus": "segmentation"}


def run_matrix(cfg: SweepConfig) -> list[dict]:
    return [{"workload": w, "gpus": g} for w in cfg.workloads for g in sorted(cfg.gpus)]


def dataset_dir(cfg: SweepConfig, workload: str) -> Path:
    return cfg.dataset_path / DATASET_KIND[workload]


def stage_datasets(cfg: SweepConfig) -> dict:
    """Generate (or stage from `stage_from`) each workload's dataset; manifest-checked."""
    from bench.analysis.dataset_checks import check_manifest
    from bench.data.generate import GenerateSpec, generate
    from bench.data.stage import stage

    out = {}
    for workload in cfg.workloads:
        kind = DATASET_KIND[workload]
        target = dataset_dir(cfg, workload)
        if cfg.stage_from is not None:
            result = stage(cfg.stage_from / kind, target)
        else:
            source = cfg.dataset_path / f".source-{kind}"
            # two copies on the storage under test: the generated source and the staged tree
            generate(GenerateSpec(kind, source, images=cfg.dataset_images, seed=cfg.train.seed), copies=2)
            result = stage(source, target)
        report = check_manifest(target, expect_images=None if cfg.stage_from else cfg.dataset_images)
        if not report["success"]:
            from bench.errors import DatasetError

            raise DatasetError(f"{target}: manifest checks failed: {report['failed']}")
        out[workload] = {
            "path": str(target),
            "files": result.files,
            "bytes": result.bytes,
            "copied": result.copied,
            "skipped": result.skipped,
        }
    return out


PROBE_FILE = "probe.json"


def probe_storage(cfg: SweepConfig, suite_run_id: str) -> dict:
    """fio's ceiling of the staged datasets, written beside the run's results; raises ProbeError or
    DatasetError (the task fails; the suite is evaluated without a ceiling, history untouched)."""
    from bench.data.probe import ProbeSettings, probe

    dirs = [dataset_dir(cfg, w) for w in cfg.workloads]
    result = probe(dirs, ProbeSettings(max_jobs=cfg.probe_max_jobs, seconds=cfg.probe_seconds)).as_dict()
    result["probed_at"] = datetime.now(UTC).isoformat()
    out = suite_dir(cfg.output_dir, suite_run_id)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{PROBE_FILE}.tmp"
    tmp.write_text(json.dumps(result, allow_nan=False))
    tmp.replace(out / PROBE_FILE)
    return {k: result[k] for k in ("ceiling_mb_s", "conclusive", "reason", "method")}


def read_probe(out: Path) -> dict | None:
    try:
        return json.loads((out / PROBE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def run_spec(cfg: SweepConfig, suite_run_id: str, workload: str, gpus: int, variant: str = "") -> RunSpec:
    """One scale's launch; `variant` ("warm" or "synthetic") is a differential rerun of it."""
    synthetic = cfg.train.synthetic or variant == "synthetic"
    update = {"workload": workload, "synthetic": synthetic, "data": None if synthetic else dataset_dir(cfg, workload)}
    if variant == "warm":
        update |= {"warm_cache": True, "drop_caches": False}
    train = TrainConfig.model_validate(cfg.train.model_dump() | update)
    name = f"{workload}-{gpus}" + (f"-{variant}" if variant else "")
    return RunSpec(
        run_id=f"{suite_run_id}-{name}".replace(":", "-").replace("+", "-"),
        train=train,
        ranks=gpus,
        output_dir=suite_dir(cfg.output_dir, suite_run_id) / name,
        hosts=cfg.hosts,
        partition=cfg.partition,
        account=cfg.account,
        gpus_per_node=cfg.gpus_per_node,
        ranks_per_node=cfg.ranks_per_node,
        time_limit_s=cfg.time_limit_s,
        cpus_per_rank=cfg.cpus_per_rank,
        oversubscribe=cfg.oversubscribe,
    )


def suite_dir(output_dir: Path, suite_run_id: str) -> Path:
    """Where one suite run's outputs live: Airflow run ids hold ':' and '+', which stay out of paths."""
    return output_dir / "".join(c if c.isalnum() or c in "._-" else "-" for c in suite_run_id)


def run_one(cfg: SweepConfig, launcher, suite_run_id: str, workload: str, gpus: int, variant: str = "") -> RunResult:
    """Submit, wait (cancelling on timeout), collect: a failure becomes a FAILED result, not an exception."""
    from bench.errors import BenchError
    from bench.launch.leftovers import submit_recorded

    spec = run_spec(cfg, suite_run_id, workload, gpus, variant)
    try:
        handle = submit_recorded(launcher, spec)
    except BenchError as error:
        return launch_failed(spec, launcher.name, error)
    state, reason = wait(launcher, handle, cfg.time_limit_s + 60)
    return fetch_and_collect(launcher, handle, state, reason)


def _rows(cfg: SweepConfig, suite_run_id: str, runs: list[dict], started_at: str) -> list[dict]:
    from bench.analysis.frame import config_key, row_from_result

    key = config_key(cfg)
    return [
        row_from_result(suite_run_id, r["workload"], r["gpus"], r["result"], cfg.launcher, cfg.cluster, started_at, key)
        for r in runs
    ]


def differential_runs(
    cfg: SweepConfig, launcher, suite_run_id: str, runs: list[dict], started_at: str, log=print
) -> list[dict]:
    """The warm-cache and synthetic reruns of each scale below its bound and of its baseline, one at a
    time after every scale has ended (bench.analysis.differential); [] when confirm_causes is off."""
    from bench.analysis.differential import rerun_plan
    from bench.analysis.frame import build_frame
    from bench.analysis.scaling import derive
    from bench.errors import ResultsInputError

    if not cfg.confirm_causes or cfg.train.synthetic:
        return []
    try:
        frame = derive(build_frame(_rows(cfg, suite_run_id, runs, started_at)), cfg.thresholds.baseline_gpus)
    except ResultsInputError:
        return []  # no baseline to compare with: evaluate says why
    out = []
    for item in rerun_plan(frame, cfg.thresholds.scaling_bound):
        log(f"  confirming the cause: {item['workload']} on {item['gpus']} rank(s), {item['variant']} ...")
        result = run_one(cfg, launcher, suite_run_id, item["workload"], item["gpus"], item["variant"])
        log(f"    {result.state} {result.reason}".rstrip())
        out.append({**item, "result": result.as_dict()})
    return out


def rerun_frame(cfg: SweepConfig, suite_run_id: str, reruns: list[dict], started_at: str) -> pd.DataFrame:
    """One row per differential rerun: valid only where it completed and its measurement holds."""
    from bench.analysis.frame import build_frame
    from bench.analysis.verdict import measurement_problems

    if not reruns:
        return pd.DataFrame(columns=["workload", "gpus", "variant", "valid", "throughput_img_s"])
    rows = _rows(cfg, suite_run_id, reruns, started_at)
    # one frame per rerun: build_frame sorts by (workload, gpus), and each scale has two variants
    frame = pd.concat(
        [build_frame([row]).assign(variant=r["variant"]) for row, r in zip(rows, reruns, strict=True)],
        ignore_index=True,
    )
    frame["valid"] = frame["valid"].astype(bool) & measurement_problems(frame, cfg.thresholds).eq("")
    return frame[["workload", "gpus", "variant", "valid", "throughput_img_s"]]


@dataclass
class Evaluation:
    frame: pd.DataFrame
    passed: bool
    failures: list[dict]
    warnings: list[dict]
    data_docs: str | None
    verdict: str = "PASSED"  # PASSED, FAILED or INCONCLUSIVE
    inconclusive: list[dict] = field(default_factory=list)
    probe: dict | None = None  # the storage probe (probe.json), with "accepted" and "history_median"


def evaluate(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started_at: str,
    store=None,
    data_docs_dir: Path | None = None,
    probe: dict | None = None,
) -> Evaluation:
    """Results frame from run results, derived figures, what is conclusive, history, then the GX suite."""
    from bench.analysis.bottleneck import add_bottlenecks, without_input_side
    from bench.analysis.cache import label_cache_served
    from bench.analysis.differential import add_differential
    from bench.analysis.expectations import prepare, validate
    from bench.analysis.frame import build_frame
    from bench.analysis.scaling import derive
    from bench.analysis.sizing import add_sizing
    from bench.analysis.verdict import (
        INCONCLUSIVE,
        PASS,
        measurement_problems,
        oversubscription_note,
        row_verdicts,
        suite_verdict,
        with_baseline_problems,
    )

    reruns = [r for r in runs if r.get("variant")]
    frame = build_frame(_rows(cfg, suite_run_id, [r for r in runs if not r.get("variant")], started_at))
    ceiling = probe["ceiling_mb_s"] if probe and probe.get("conclusive") else None
    frame = label_cache_served(frame, cfg.storage_cache_bytes, ceiling)
    frame = derive(frame, cfg.thresholds.baseline_gpus).drop(columns=["throughput_boot"])
    frame["inconclusive_reason"] = with_baseline_problems(frame, measurement_problems(frame, cfg.thresholds))
    frame = add_sizing(frame, ceiling, cfg.thresholds.min_supported_gpus)
    history = None
    if store is not None:
        from bench.analysis.regression import history_stats

        values = store.history_values(frame, cfg.thresholds.history_runs, suite_run_id)
        history = history_stats(values, frame.index)
    prepared = prepare(frame, cfg.thresholds, history)
    verdict = validate(prepared, cfg.thresholds, data_docs_dir)
    critical = {
        k: [n for n in names if n != "ExpectBandwidthNotCacheDistorted"] for k, names in verdict.per_row.items()
    }
    # Whether each row's own figures pass, whatever the storage sizing says: that decides history.
    own = {k: [n for n in names if n != "ExpectStorageFeedsPlannedGpus"] for k, names in critical.items()}
    own_pass = row_verdicts(prepared, own)["verdict"] == PASS
    prepared = row_verdicts(prepared, critical)
    prepared["passed"] = prepared["verdict"] == PASS
    au_failed = {k for k, names in critical.items() if "ExpectAcceleratorUtilisationAtLeast" in names}
    prepared = add_bottlenecks(prepared, cfg.thresholds.straggler_gap, ceiling, au_failed)
    prepared = add_differential(
        prepared,
        rerun_frame(cfg, suite_run_id, reruns, started_at),
        cfg.thresholds.scaling_bound,
        without_input_side(prepared, cfg.thresholds.straggler_gap, ceiling),
    )
    prepared["failed_expectations"] = [
        json.dumps(verdict.per_row[(w, int(g))]) for w, g in zip(prepared["workload"], prepared["gpus"], strict=True)
    ]
    # History learns only from conclusive, passing rows on their own slots: a regression, a short window
    # or a contended (oversubscribed) figure must never become the norm.
    prepared["accepted"] = prepared["valid"].astype(bool) & own_pass & ~prepared["oversubscribed"].astype(bool)
    by_key = {(r["workload"], int(r["gpus"])): r for _, r in prepared.iterrows()}
    failures = []
    for f in verdict.failures:
        row = by_key[(f["workload"], int(f["gpus"]))]
        if f["expectation"] == "ExpectStorageFeedsPlannedGpus":
            f = {**f, "reason": shortfall_text(row)}
        if row.get("bottleneck"):
            f = {**f, "bottleneck": row["bottleneck"], "evidence": row["bottleneck_evidence"]}
        note = oversubscription_note(row)
        failures.append({**f, "reason": "; ".join(x for x in (f.get("reason", ""), note) if x)} if note else f)
    inconclusive = [
        {"workload": r["workload"], "gpus": int(r["gpus"]), "reason": r["inconclusive_reason"]}
        for _, r in prepared.iterrows()
        if r["verdict"] == INCONCLUSIVE
    ]
    outcome = suite_verdict(prepared)
    storage_failures, storage_inconclusive, probe = storage_checks(cfg, suite_run_id, prepared, probe, store)
    failures += storage_failures
    inconclusive += storage_inconclusive
    if storage_failures:
        outcome = "FAILED"
    elif storage_inconclusive and outcome == "PASSED":
        outcome = "INCONCLUSIVE"
    return Evaluation(
        prepared, outcome == "PASSED", failures, verdict.warnings, verdict.data_docs, outcome, inconclusive, probe
    )


def shortfall_text(row) -> str:
    fed, planned = int(row["supported_gpus"]), int(row["min_supported_gpus"])
    return (
        f"storage feeds {fed} GPUs, the cluster plans {planned}: short by {planned - fed} "
        f"(fio ceiling {row['storage_ceiling_mb_s']:.1f} MB/s / {row['per_gpu_read_mb_s']:.2f} MB/s per GPU "
        f"measured at {int(row['gpus'])} GPU(s))"
    )


def storage_checks(
    cfg: SweepConfig, suite_run_id: str, frame: pd.DataFrame, probe: dict | None, store
) -> tuple[list[dict], list[dict], dict | None]:
    """The probe's own regression check against earlier probes of the same storage, and what cannot be
    judged when the suite asks for a supported GPU count that no conclusive probe backs."""
    failures: list[dict] = []
    inconclusive: list[dict] = []
    wanted = cfg.thresholds.min_supported_gpus
    if probe is None:
        if wanted is not None and cfg.probe_storage and not cfg.train.synthetic:
            inconclusive.append(
                {"workload": "storage", "gpus": "*", "reason": "storage probe did not complete: no sizing"}
            )
        return failures, inconclusive, None
    probe = dict(probe)
    history = (
        store.probe_history(
            cfg.cluster, probe["paths"], probe["sample_bytes"], cfg.thresholds.history_runs, suite_run_id
        )
        if store
        else []
    )
    judged = series_floor(history, cfg.thresholds.regression_tolerance)
    floor, used = judged["regression_floor"], judged["tolerance_used"]
    probe["history_median"], probe["history_n"] = judged["history_median"], judged["history_n"]
    probe["regression_floor_mb_s"], probe["regression_tolerance_used"] = floor, used
    # The same noise-aware floor as the training figures: a 3-second fio level on a small dataset
    # moves more than 10% run to run, and a fixed tolerance called that noise a regression.
    regressed = bool(probe["conclusive"] and floor is not None and probe["ceiling_mb_s"] < floor)
    if regressed:
        failures.append(
            {
                "workload": "storage",
                "gpus": "*",
                "metric": "storage_ceiling_mb_s",
                "expectation": "ExpectStorageCeilingNotRegressed",
                "value": round(probe["ceiling_mb_s"], 1),
                "bound": round(floor, 1),
                "reason": (
                    f"fio read ceiling {probe['ceiling_mb_s']:.1f} MB/s vs history median "
                    f"{probe['history_median']:.1f} MB/s over {probe['history_n']} probes "
                    f"(tolerance used {used:.0%})"
                ),
            }
        )
    if not probe["conclusive"] and wanted is not None:
        inconclusive.append({"workload": "storage", "gpus": "*", "reason": f"storage probe: {probe['reason']}"})
    elif wanted is not None:
        for workload in cfg.workloads:
            sized = frame[(frame["workload"] == workload) & frame["supported_gpus"].notna()]
            if sized.empty:
                inconclusive.append(
                    {
                        "workload": workload,
                        "gpus": "*",
                        "reason": "no valid, cache-free epoch-1 bandwidth at any scale: per-GPU demand unknown",
                    }
                )
    probe["accepted"] = bool(probe["conclusive"] and not regressed)
    return failures, inconclusive, probe


def new_suite_run_id() -> str:
    return "manual-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")


def suite_run_identity(dag_id: str, run_id: str) -> str:
    """One suite run's identity: its DAG and Airflow's run_id (which alone repeats across suites on one
    schedule). It names the run folder, the jobs, the store rows and the pages."""
    return f"{dag_id}.{run_id}"


def airflow_run_id(dag_id: str | None, suite_run_id: str) -> str:
    """Airflow's run_id back from a suite run's identity (runs stored before it held the DAG stay as they are)."""
    return suite_run_id.removeprefix(f"{dag_id}.") if dag_id else suite_run_id


def sweep(cfg: SweepConfig, store_url: str, suite_run_id: str | None = None, log=print) -> dict:
    """The whole suite without Airflow: what the README's first command runs."""
    from bench.launch.registry import build_launcher

    suite_run_id = suite_run_id or new_suite_run_id()
    started = datetime.now(UTC).isoformat()
    log(f"suite run {suite_run_id}: staging datasets under {cfg.dataset_path}")
    if not cfg.train.synthetic:
        stage_datasets(cfg)
    launcher = build_launcher(cfg.launcher)
    runs = []
    for item in run_matrix(cfg):
        log(f"  {item['workload']} on {item['gpus']} rank(s) via {cfg.launcher} ...")
        result = run_one(cfg, launcher, suite_run_id, item["workload"], item["gpus"])
        log(f"    {result.state} {result.reason}".rstrip())
        runs.append({**item, "result": result.as_dict()})
    runs += differential_runs(cfg, launcher, suite_run_id, runs, started, log)
    if cfg.probe_storage and not cfg.train.synthetic:
        from bench.errors import BenchError

        try:
            probed = probe_storage(cfg, suite_run_id)
            log(f"  storage probe: ceiling {probed['ceiling_mb_s']:.1f} MB/s ({probed['method']} reads)")
        except BenchError as error:  # the suite is still evaluated; no ceiling, nothing stored for it
            log(f"  storage probe failed: {error}")
    return {"suite_run_id": suite_run_id, **finish(cfg, suite_run_id, runs, started, store_url)}


def finish(
    cfg: SweepConfig, suite_run_id: str, runs: list[dict], started: str, store_url: str, dag_id: str | None = None
) -> dict:
    """evaluate -> report -> store, once for `bench sweep` and the DAG alike; a small outcome dict."""
    from bench.report.html import write_report
    from bench.store.db import ResultsStore

    store = ResultsStore(store_url)
    out = suite_dir(cfg.output_dir, suite_run_id)
    ev = evaluate(cfg, suite_run_id, runs, started, store, out / "data-docs", read_probe(out))
    ev.frame.to_csv(out / "results.csv", index=False)
    # Which DAG's read permission guards this run's web pages (none for a run made outside Airflow).
    (out / "suite.json").write_text(
        json.dumps({"dag_id": dag_id, "run_id": suite_run_id, "verdict": ev.verdict, "started_at": started})
    )
    history, probes = store.frame(), store.probes(cfg.cluster)
    runs = [r for r in runs if not r.get("variant")]  # the reruns are figures on their scale's row
    report = write_report(out / "report.html", suite_run_id, ev, runs, history, cfg, probes)
    suite = {
        "suite_run_id": suite_run_id,
        "started_at": started,
        "cluster": cfg.cluster,
        "passed": ev.passed,
        "report_path": str(report),
        "config": cfg.model_dump_json(),
        "dag_id": dag_id,
    }
    store.upsert(ev.frame, suite)
    if ev.probe is not None:
        store.upsert_probe(
            {k: ev.probe[k] for k in ("ceiling_mb_s", "conclusive", "reason", "method", "block_size", "sample_bytes")}
            | {
                "suite_run_id": suite_run_id,
                "cluster": cfg.cluster,
                "probed_at": ev.probe["probed_at"],
                "paths": ev.probe["paths"],
                "levels": ev.probe["levels"],
                "accepted": ev.probe["accepted"],
            }
        )
    changes = watch_changes(store, ev.frame, suite_run_id)
    if changes:  # the report was written before the store had this run; it shows what the run confirmed
        write_report(report, suite_run_id, ev, runs, history, cfg, probes, changes)
    return {
        "passed": ev.passed,
        "verdict": ev.verdict,
        "inconclusive": ev.inconclusive,
        "failures": ev.failures,
        "warnings": ev.warnings,
        "report": str(report),
        "data_docs": ev.data_docs,
        "results_csv": str(out / "results.csv"),
        "changes": changes,
    }


def watch_changes(store, frame: pd.DataFrame, suite_run_id: str) -> list[dict]:
    """Change points this run confirmed in each of its series' history, stored once; the notices to send."""
    from bench.analysis.changes import WATCHED, series_keys, watch_series

    known = store.change_alerts()
    notices = []
    for cluster, workload, gpus, config_key in series_keys(frame):
        series = store.accepted_series(cluster, workload, gpus, config_key)
        for metric in WATCHED:
            mine = known[
                (known["cluster"] == cluster)
                & (known["workload"] == workload)
                & (known["gpus"] == gpus)
                & (known["config_key"] == config_key)
                & (known["metric"] == metric)
            ]
            rows, found = watch_series(series, metric, mine, suite_run_id)
            for row in rows:
                store.upsert_change(row)
            # plain Python values: the outcome travels as an XCom (numpy integers do not serialise)
            notices += [
                json.loads(json.dumps({"kind": n.kind, "line": n.line(), **n.row}, default=lambda v: v.item()))
                for n in found
            ]
    return notices
