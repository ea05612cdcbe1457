"""The suite's steps, shared by `bench sweep` and the Airflow tasks: params -> stage -> launch ->
per-rank metrics -> results frame -> expectations -> store -> report -> alert."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from bench.config import RunSpec, SweepConfig
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


def run_spec(cfg: SweepConfig, suite_run_id: str, workload: str, gpus: int) -> RunSpec:
    train = cfg.train.model_copy(
        update={
            "workload": workload,
            "synthetic": cfg.train.synthetic,
            "data": None if cfg.train.synthetic else dataset_dir(cfg, workload),
        }
    )
    return RunSpec(
        run_id=f"{suite_run_id}-{workload}-{gpus}".replace(":", "-").replace("+", "-"),
        train=train,
        ranks=gpus,
        output_dir=suite_dir(cfg.output_dir, suite_run_id) / f"{workload}-{gpus}",
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


def run_one(cfg: SweepConfig, launcher, suite_run_id: str, workload: str, gpus: int) -> RunResult:
    """Submit, wait (cancelling on timeout), collect: a failure becomes a FAILED result, not an exception."""
    from bench.errors import BenchError
    from bench.launch.leftovers import submit_recorded

    spec = run_spec(cfg, suite_run_id, workload, gpus)
    try:
        handle = submit_recorded(launcher, spec)
    except BenchError as error:
        return launch_failed(spec, launcher.name, error)
    state, reason = wait(launcher, handle, cfg.time_limit_s + 60)
    return fetch_and_collect(launcher, handle, state, reason)


@dataclass
class Evaluation:
    frame: pd.DataFrame
    passed: bool
    failures: list[dict]
    warnings: list[dict]
    data_docs: str | None
    verdict: str = "PASSED"  # PASSED, FAILED or INCONCLUSIVE
    inconclusive: list[dict] = field(default_factory=list)


def evaluate(
    cfg: SweepConfig,
    suite_run_id: str,
    runs: list[dict],
    started_at: str,
    store=None,
    data_docs_dir: Path | None = None,
) -> Evaluation:
    """Results frame from run results, derived figures, what is conclusive, history, then the GX suite."""
    from bench.analysis.expectations import prepare, validate
    from bench.analysis.frame import build_frame, config_key, row_from_result
    from bench.analysis.scaling import derive
    from bench.analysis.verdict import (
        INCONCLUSIVE,
        PASS,
        measurement_problems,
        oversubscription_note,
        row_verdicts,
        suite_verdict,
        with_baseline_problems,
    )

    key = config_key(cfg)
    rows = [
        row_from_result(suite_run_id, r["workload"], r["gpus"], r["result"], cfg.launcher, cfg.cluster, started_at, key)
        for r in runs
    ]
    frame = build_frame(rows)
    if cfg.storage_cache_bytes:  # the storage's own cache could serve the whole dataset: not a storage figure
        fits = frame["dataset_bytes"] <= cfg.storage_cache_bytes
        frame.loc[fits, "cache_risk"] = True
        frame.loc[fits, "bandwidth_valid"] = False
    frame = derive(frame, cfg.thresholds.baseline_gpus).drop(columns=["throughput_boot"])
    frame["inconclusive_reason"] = with_baseline_problems(frame, measurement_problems(frame, cfg.thresholds))
    history = store.history_median(frame, cfg.thresholds.history_runs, suite_run_id) if store else None
    prepared = prepare(frame, cfg.thresholds, history)
    verdict = validate(prepared, cfg.thresholds, data_docs_dir)
    critical = {
        k: [n for n in names if n != "ExpectBandwidthNotCacheDistorted"] for k, names in verdict.per_row.items()
    }
    prepared = row_verdicts(prepared, critical)
    prepared["passed"] = prepared["verdict"] == PASS
    prepared["failed_expectations"] = [
        json.dumps(verdict.per_row[(w, int(g))]) for w, g in zip(prepared["workload"], prepared["gpus"], strict=True)
    ]
    # History learns only from conclusive, passing rows on their own slots: a regression, a short window
    # or a contended (oversubscribed) figure must never become the norm.
    prepared["accepted"] = (
        prepared["valid"].astype(bool) & prepared["passed"].astype(bool) & ~prepared["oversubscribed"].astype(bool)
    )
    by_key = {(r["workload"], int(r["gpus"])): r for _, r in prepared.iterrows()}
    failures = []
    for f in verdict.failures:
        note = oversubscription_note(by_key[(f["workload"], int(f["gpus"]))])
        failures.append({**f, "reason": "; ".join(x for x in (f.get("reason", ""), note) if x)} if note else f)
    inconclusive = [
        {"workload": r["workload"], "gpus": int(r["gpus"]), "reason": r["inconclusive_reason"]}
        for _, r in prepared.iterrows()
        if r["verdict"] == INCONCLUSIVE
    ]
    outcome = suite_verdict(prepared)
    return Evaluation(
        prepared, outcome == "PASSED", failures, verdict.warnings, verdict.data_docs, outcome, inconclusive
    )


def new_suite_run_id() -> str:
    return "manual-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S")


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
    return {"suite_run_id": suite_run_id, **finish(cfg, suite_run_id, runs, started, store_url)}


def finish(
    cfg: SweepConfig, suite_run_id: str, runs: list[dict], started: str, store_url: str, dag_id: str | None = None
) -> dict:
    """evaluate -> report -> store, once for `bench sweep` and the DAG alike; a small outcome dict."""
    from bench.report.html import write_report
    from bench.store.db import ResultsStore

    store = ResultsStore(store_url)
    out = suite_dir(cfg.output_dir, suite_run_id)
    ev = evaluate(cfg, suite_run_id, runs, started, store, out / "data-docs")
    ev.frame.to_csv(out / "results.csv", index=False)
    # Which DAG's read permission guards this run's web pages (none for a run made outside Airflow).
    (out / "suite.json").write_text(
        json.dumps({"dag_id": dag_id, "run_id": suite_run_id, "verdict": ev.verdict, "started_at": started})
    )
    report = write_report(out / "report.html", suite_run_id, ev, runs, store.frame(), cfg)
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
    return {
        "passed": ev.passed,
        "verdict": ev.verdict,
        "inconclusive": ev.inconclusive,
        "failures": ev.failures,
        "warnings": ev.warnings,
        "report": str(report),
        "data_docs": ev.data_docs,
        "results_csv": str(out / "results.csv"),
    }
