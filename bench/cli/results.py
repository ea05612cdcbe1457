"""`bench evaluate` and `bench detect`: the exact contracts other tools script against."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import get_args

from bench.config.defaults import DEFAULT_MIN_BANDWIDTH_EFFICIENCY, DEFAULT_MIN_SCALING_EFFICIENCY
from bench.config.models import Thresholds
from bench.config.settings import renamed_settings
from bench.config.types import Frozen, GpuCount, PoolBy, parse
from bench.errors import ConfigError


def add_parsers(sub) -> None:
    e = sub.add_parser("evaluate", help="check a results table for linear scaling (exit 0 pass, 1 fail, 2 bad input)")
    e.add_argument("results", type=Path)
    e.add_argument("--baseline-gpus", type=int)
    e.add_argument(
        "--min-scaling-efficiency",
        type=float,
        help=f"one bound for every scale (default {DEFAULT_MIN_SCALING_EFFICIENCY})",
    )
    e.add_argument("--min-bandwidth-efficiency", type=float, help=f"default {DEFAULT_MIN_BANDWIDTH_EFFICIENCY}")
    e.add_argument(
        "--bounds",
        type=Path,
        help="YAML/JSON bounds: min_scaling_efficiency, min_scaling_efficiency_by_gpus {gpus: bound}, "
        "min_bandwidth_efficiency (flags override it)",
    )
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_evaluate)
    d = sub.add_parser("detect", help="change points per (model, gpus) in a history table")
    d.add_argument("history", type=Path)
    d.add_argument("--metric", required=True)
    # Defaults are DetectorSettings' own, read when the command runs (importing the detector here would
    # put pandas into every `bench` start, each rank's included).
    d.add_argument("--max-pvalue", type=float, help="default: the detector's (DetectorSettings.max_pvalue)")
    d.add_argument("--window", type=int, help="default: the detector's (DetectorSettings.window)")
    d.add_argument("--json", action="store_true")
    d.add_argument(
        "--online",
        action="store_true",
        help="replay the history run by run, as the weekly DAG sees it: each change point gets detected_at, "
        "the run that confirmed it (and confirmed false if a later run no longer shows it)",
    )
    d.add_argument(
        "--pool",
        choices=get_args(PoolBy),
        help="with --online: also pool each cluster's series (the table's 'cluster' column) run by run and "
        "report the shared drops they confirm (issue 63); per-series drops only the watch bounds confirm are "
        "listed with status watch",
    )
    d.set_defaults(func=_detect)


def _clean(v):
    """JSON has no NaN or Infinity: a figure that could not be computed is null."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


class Baseline(Frozen):
    baseline_gpus: GpuCount | None = None


def _bounds_file(path: Path) -> dict:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"--bounds {path}: {error}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--bounds {path}: must be a mapping such as min_scaling_efficiency_by_gpus: {{16: 0.9}}")
    return renamed_settings({str(k): v for k, v in doc.items()}, f"--bounds {path}: ")  # a suite file's old key


def _evaluate(args: argparse.Namespace) -> int:
    from bench.analysis.frame import read_results_csv
    from bench.analysis.verdict.expectations import prepare, validate
    from bench.analysis.verdict.scaling import derive

    fields = _bounds_file(args.bounds) if args.bounds else {}
    flags = {
        "baseline_gpus": args.baseline_gpus,
        "min_scaling_efficiency": args.min_scaling_efficiency,
        "min_bandwidth_efficiency": args.min_bandwidth_efficiency,
    }
    fields |= {k: v for k, v in flags.items() if v is not None}
    prefix = f"--bounds {args.bounds}: " if args.bounds else "--"
    # the scale the others are judged against: this table's, not a bound (Thresholds is the suite's bounds group)
    baseline = parse(Baseline, {"baseline_gpus": fields.pop("baseline_gpus", None)}, prefix=prefix).baseline_gpus
    thresholds = parse(Thresholds, fields, prefix=prefix)
    frame = read_results_csv(args.results)
    for col in ("throughput_img_s", "epoch_time_s", "avg_read_mb_s", "peak_read_mb_s", "gpu_util"):
        if col not in frame:
            frame[col] = math.nan
    frame["state"], frame["valid"], frame["reason"] = "COMPLETED", True, ""
    if "bandwidth_valid" not in frame:
        frame["bandwidth_valid"] = True  # a user's table is taken as cache-free unless it says otherwise
    derived = derive(frame, baseline)
    prepared = prepare(derived, thresholds)
    verdict = validate(prepared, thresholds)
    keys = zip(prepared["workload"], prepared["gpus"], strict=True)
    bounds = dict(zip(keys, prepared["min_scaling_efficiency"], strict=True))
    rows = []
    for r in derived.to_dict("records"):
        failed = [
            n for n in verdict.per_row[(r["workload"], int(r["gpus"]))] if n != "ExpectBandwidthNotCacheDistorted"
        ]
        rows.append(
            {
                "model": r["workload"],
                "gpus": int(r["gpus"]),
                "scaling_efficiency": _clean(r["scaling_efficiency"]),
                "bandwidth_efficiency": _clean(r["bandwidth_efficiency"]),
                "passed": not failed,
                "failed": failed,
            }
        )
    if args.json:
        print(json.dumps({"passed": verdict.passed, "rows": rows}, allow_nan=False))
    else:
        print(f"{'model':<16}{'gpus':>6}{'scaling_eff':>13}{'bound':>7}{'bw_eff':>9}  result")
        for r in rows:
            bound = _clean(float(bounds[(r["model"], r["gpus"])]))
            se = "—" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency']:.3f}"
            bd = "—" if bound is None else f"{bound:.2f}"
            be = "—" if r["bandwidth_efficiency"] is None else f"{r['bandwidth_efficiency']:.3f}"
            result = "pass" if r["passed"] else "FAIL " + ",".join(r["failed"])
            print(f"{r['model']:<16}{r['gpus']:>6}{se:>13}{bd:>7}{be:>9}  {result}")
        print("PASSED" if verdict.passed else "FAILED")
    return 0 if verdict.passed else 1


CHANGE_KEYS = ("model", "gpus", "timestamp", "before", "after", "change", "pvalue")


def _detect(args: argparse.Namespace) -> int:
    from bench.analysis.history.detect import (
        DetectorSettings,
        change_points,
        online_change_points,
        outlier_points,
        read_history_csv,
    )

    args.window = DetectorSettings.window if args.window is None else args.window
    args.max_pvalue = DetectorSettings.max_pvalue if args.max_pvalue is None else args.max_pvalue
    if not 4 <= args.window <= 10_000:
        raise ConfigError(f"--window: {args.window} must be between 4 and 10000 (points per comparison window)")
    if not 0 < args.max_pvalue < 1:
        raise ConfigError(f"--max-pvalue: {args.max_pvalue} must be between 0 and 1 (exclusive)")
    if args.pool and not args.online:
        raise ConfigError("--pool cluster: needs --online (the pooled test is a weekly replay)")
    history = read_history_csv(args.history, args.metric)
    settings = DetectorSettings(
        max_pvalue=args.max_pvalue,
        window=args.window,
        new_level_max_pvalue=min(args.max_pvalue, DetectorSettings.new_level_max_pvalue),
    )
    if args.pool:
        return _pooled(args, history, settings)
    # `confidence` (issue 54): 1 - p of the test that found each change point.
    keys = CHANGE_KEYS + (("detected_at", "confirmed", "confidence") if args.online else ())
    found = (online_change_points if args.online else change_points)(history, args.metric, settings)
    # One-week outliers are set aside before detection: listed apart, never as change points.
    aside = outlier_points(history, args.metric, settings, online=args.online)
    if args.json:
        print(json.dumps({"change_points": [{k: c[k] for k in keys} for c in found], "outliers": aside}))
        return 0
    extra = f"  {'detected_at':<26}" if args.online else ""
    print(f"{'model':<16}{'gpus':>6}  {'timestamp':<26}{'before':>12}{'after':>12}{'change':>9}{extra}")
    for c in found:
        when = ""
        if args.online:
            flags = (("not confirmed later", c["confirmed"]), ("recorded, not sent", c["alerted"]))
            notes = [note for note, ok in flags if not ok]
            when = f"  {c['detected_at']:<26}{'; '.join(notes)}"
        print(
            f"{c['model']:<16}{c['gpus']:>6}  {c['timestamp']:<26}{c['before']:>12.4g}{c['after']:>12.4g}"
            f"{c['change']:>+9.1%}{when}"
        )
    if not found:
        print("no change points")
    for o in aside:
        seen = f" (set aside by the run of {o['detected_at']})" if args.online else ""
        print(f"outlier, not a change point: {o['model']} {o['gpus']} GPUs at {o['timestamp']}: {o['value']:.4g}{seen}")
    return 0


def _pooled(args: argparse.Namespace, history, settings) -> int:
    """`bench detect --online --pool cluster`: the cluster changes, the per-series changes (watch ones
    marked, those a cluster change covers folded into it) and why a cluster pooled nothing."""
    from bench.analysis.history.cluster_changes import pool_report
    from bench.analysis.history.detect import outlier_points

    report = pool_report(history, args.metric, settings, args.history)
    if args.json:
        aside = outlier_points(history, args.metric, settings, online=True)
        print(json.dumps(report | {"outliers": aside}, allow_nan=False))
        return 0
    for c in report["clusters"]:
        print(_cluster_line(c))
    if not report["clusters"]:
        print("no cluster changes")
    for r in report["change_points"]:
        how = "watch (not alerted)" if r["status"] == "watch" else "alerted" if r["alerted"] else "not alerted"
        how = f"in the cluster change of {r['folded_into']}" if r.get("folded_into") else how
        print(f"[{r['cluster']}] {r['model']} @ {r['gpus']} GPUs at {r['timestamp']}: {r['change']:+.1%}, {how}")
    for n in report["notes"]:
        print(f"[{n['cluster']}] {n['note']}")
    return 0


def _cluster_line(c: dict) -> str:
    """One cluster change (or watch) as a line: the shared drop with its interval, what moved, the kind."""
    moved = ", ".join(c["moved"]) or "none"
    still = f"; did not move: {', '.join(c['unmoved'])}" if c["unmoved"] else ""
    back = f"; recovered at {c['recovered_at']}" if c["recovered_at"] else ""
    return (
        f"[{c['cluster']}] {c['status']}: shared drop {c['shared_drop']:.1%} (95% CI {c['ci_low']:.1%} to "
        f"{c['ci_high']:.1%}) from {c['changed_at']}, detected {c['detected_at']}; {c['series_moved']} of "
        f"{c['series_total']} series moved ({moved}){still}; moved most: {c['kind']}{back}"
    )
