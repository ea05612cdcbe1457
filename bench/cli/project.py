"""`bench project`: images/s, efficiency, exposed communication and storage use projected past this machine."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from bench.errors import ConfigError

# bench.analysis.projection's Literals ComputeFrom (inputs) and Algorithm (allreduce), written here because
# importing them (pandas) on every `bench` start is what the CLI avoids; tests/bench/test_defaults_once.py
# checks they agree.
COMPUTE_FROM = ("one-rank", "independent")
ALGORITHMS = ("ring", "tree", "auto")
MAX_GPUS = 1_000_000  # far past any cluster the model's assumptions (one fabric, flat storage) describe


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "project",
        help="project scaling to larger GPU counts from measured ceilings (exit 0, 2 bad input)",
        description="Projections are model figures, labelled as such; measured scales are shown beside the model.",
    )
    p.add_argument("run_dir", nargs="?", type=Path, help="a run folder (its results.csv) or a results CSV")
    p.add_argument("--gpus", required=True, help="GPU counts to project, e.g. 8,64,1024")
    p.add_argument("--cluster", type=Path, help="YAML/JSON: nodes, gpus_per_node, intra/inter_node_link, latency")
    p.add_argument("--json", action="store_true")
    p.add_argument("--workload", help="one workload of the run (needed without RUN_DIR: the name to report)")
    p.add_argument("--compute-img-s", help="per-GPU images/s (default: the run's 1-rank rate)")
    p.add_argument(
        "--compute-from",
        choices=COMPUTE_FROM,
        help="per-GPU rate: the 1-rank run (default), or independent_img_s per rank at the largest one-node scale",
    )
    p.add_argument("--batch-size", help="per-rank batch (default: the run's batch_size or config_key)")
    p.add_argument("--allreduce-bytes", help="gradient bytes per step, e.g. 97MB (default: allreduce_bytes)")
    p.add_argument("--allreduce-s", help="a measured allreduce per step, seconds (default: allreduce_s)")
    p.add_argument("--allreduce-gpus", help="the ranks --allreduce-s was measured at")
    p.add_argument("--buckets", help="allreduce buckets per step (default: gradient bytes / --bucket-bytes)")
    p.add_argument(
        "--bucket-bytes", help="fusion buffer size (default: Horovod's, bench.analysis.projection's FUSION_BYTES)"
    )
    p.add_argument("--link", help="bus bandwidth for every scale, e.g. 100Gbit or 25GB/s (default: measured)")
    p.add_argument("--latency", help="one hop's latency, e.g. 5us (default 0: folded into a measured link)")
    p.add_argument("--storage-ceiling", help="storage read ceiling, e.g. 20GB/s (default: the run's fio ceiling)")
    p.add_argument("--bytes-per-image", help="storage bytes per image (default: per_gpu_read_mb_s / img/s per GPU)")
    p.add_argument("--exposed-fraction", help="share of the allreduce backward does not hide, 0-1 (default: measured)")
    p.add_argument("--algorithm", choices=ALGORITHMS, help="default: auto, the faster of ring and tree at each scale")
    p.set_defaults(func=_project)


def _positive(text: str | None, flag: str, kind: type = float) -> float | int | None:
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        what = "a whole number > 0" if kind is int else "a number > 0"
        raise ConfigError(f"{flag}: {text!r} must be {what}")
    return value


def parse_gpus(text: str) -> list[int]:
    """`8,64,1024`: positive whole numbers, each once, kept in order."""
    parts = [p.strip() for p in text.split(",")]
    counts = []
    for part in parts:
        if not re.fullmatch(r"[0-9]{1,9}", part) or not 1 <= int(part) <= MAX_GPUS:
            raise ConfigError(f"--gpus: {part!r} is not a GPU count (whole numbers 1-{MAX_GPUS}, e.g. 8,64,1024)")
        counts.append(int(part))
    if len(set(counts)) != len(counts):
        raise ConfigError(f"--gpus: {text!r} lists a count twice")
    return counts


def given_from_args(args: argparse.Namespace):
    """The flags as typed values: rates in bytes/s, sizes in bytes, times in seconds; bad ones named."""
    from bench.analysis.cluster import parse_unit, rate_bytes_s, seconds, size_bytes
    from bench.analysis.projection.inputs import Given

    def unit(parser, text: str | None, flag: str) -> float | None:
        return None if text is None else parse_unit(parser, text, flag)

    allreduce_s = None
    if args.allreduce_s is not None:
        try:
            allreduce_s = float(args.allreduce_s)
        except ValueError:
            allreduce_s = parse_unit(seconds, args.allreduce_s, "--allreduce-s")
        if not (math.isfinite(allreduce_s) and allreduce_s > 0):
            raise ConfigError(f"--allreduce-s: {args.allreduce_s!r} must be a time > 0 (seconds, or e.g. '12ms')")
    fraction = None
    if args.exposed_fraction is not None:
        try:
            fraction = float(args.exposed_fraction)
        except ValueError:
            fraction = math.nan
        if not 0 <= fraction <= 1:
            raise ConfigError(f"--exposed-fraction: {args.exposed_fraction!r} must be a number from 0 to 1")
    latency = unit(seconds, args.latency, "--latency")
    if latency is not None and latency < 0:
        raise ConfigError(f"--latency: {args.latency!r} must not be negative")
    bucket_bytes = unit(size_bytes, args.bucket_bytes, "--bucket-bytes")
    # a flag left out takes Given's default (its one definition)
    given = {"compute_from": args.compute_from, "bucket_bytes": bucket_bytes, "algorithm": args.algorithm}
    return Given(
        **{k: v for k, v in given.items() if v is not None},
        workload=args.workload,
        compute_img_s=_positive(args.compute_img_s, "--compute-img-s"),
        batch_size=_positive(args.batch_size, "--batch-size", int),
        allreduce_bytes=unit(size_bytes, args.allreduce_bytes, "--allreduce-bytes"),
        allreduce_s=allreduce_s,
        allreduce_gpus=_positive(args.allreduce_gpus, "--allreduce-gpus", int),
        buckets=_positive(args.buckets, "--buckets", int),
        link_bytes_s=unit(rate_bytes_s, args.link, "--link"),
        latency_s=latency,
        storage_bytes_s=unit(rate_bytes_s, args.storage_ceiling, "--storage-ceiling"),
        bytes_per_image=unit(size_bytes, args.bytes_per_image, "--bytes-per-image"),
        exposed_fraction=fraction,
    )


def _project(args: argparse.Namespace) -> int:
    from bench.analysis.cluster import load_cluster
    from bench.analysis.projection.inputs import inputs_from_flags, inputs_from_run, read_results
    from bench.analysis.projection.project import project

    gpus = parse_gpus(args.gpus)
    given = given_from_args(args)
    cluster = load_cluster(args.cluster) if args.cluster is not None else None
    if args.run_dir is None:
        inputs, where = [inputs_from_flags(given)], "the command line"
    else:
        frame, where = read_results(args.run_dir)
        inputs = with_probe_curve(inputs_from_run(frame, where, given), args.run_dir)
    rows = project(inputs, gpus, cluster, given, where)
    if args.json:
        print(json.dumps({"projections": [_plain(r) for r in rows]}, allow_nan=False))
    else:
        print(render(rows))
    return 0


def with_probe_curve(inputs: list, run_dir: Path) -> list:
    """The run's probe.json (bench/suite/node_probe.py), where it has one: one node's ceiling and the bound, so
    a projected scale reads at most its nodes x one node, and says whether the client or the store binds.
    Read as the suite reads it (bench.suite.plan.read_probe: no link followed, no FIFO opened, bounded)."""
    from dataclasses import replace

    from bench.suite.plan import read_probe

    probe = read_probe(Path(run_dir))
    try:
        per_node = float(probe["per_node_mb_s"]) * 1e6  # type: ignore[index]
        bound = str(probe["bound"])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):  # no probe (None), or one without the node curve
        return inputs
    return [
        replace(i, machine=replace(i.machine, storage_per_node_bytes_s=per_node, storage_bound=bound))
        if i.machine.storage_bytes_s is not None
        else i
        for i in inputs
    ]


def _plain(row: dict) -> dict:
    """JSON-safe: infinities and NaN become null (allow_nan=False refuses them)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def render(rows: list[dict]) -> str:
    """Per workload: its ceilings, then measured vs projected for the measured scales and projections beyond."""
    lines: list[str] = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        top = next(r for r in reversed(mine) if "exposed_fraction" in r)  # a projection row: every key is there
        lines.append(
            f"{workload}: {top['compute_img_s_per_gpu']:.4g} img/s per GPU ({top['compute_basis']}), batch "
            f"{top['batch_size']}, gradients {top['allreduce_bytes'] / 1e6:.4g} MB in {top['buckets']} bucket(s), "
            f"{top['bytes_per_image'] / 1e6:.4g} MB per image, storage {_num(top['storage_ceiling_mb_s'], '.6g')} MB/s "
            f"({top['storage_source'] or '—'}); exposed fraction {top['exposed_fraction']:.2f} "
            f"({top['exposed_fraction_source']})"
        )
        lines.append(
            f"{'GPUs':>6}  {'kind':<10}{'measured':>10}{'projected':>11}{'error':>8}{'eff':>6}"
            f"{'exposed ms':>11}{'storage':>9}  {'bound by':<14}link"
        )
        for r in mine:
            measured = r["images_per_s"] if r["kind"] == "measured" else None
            projected = r.get("projected_images_per_s") if r["kind"] == "measured" else r["images_per_s"]
            error = r.get("projection_error")
            exposed = r.get("exposed_comm_s")
            util = r.get("storage_utilisation")
            link = r.get("note") or (
                f"{r['link']} {r['bus_bandwidth_gb_s']:.3g} GB/s, {r['algorithm']} ({r['link_source']})"
                if r.get("link")
                else "—"
            )
            lines.append(
                f"{r['gpus']:>6}  {r['kind']:<10}{_num(measured, '.1f'):>10}{_num(projected, '.1f'):>11}"
                f"{'—' if error is None else format(error, '+.0%'):>8}{_num(r['efficiency'], '.2f'):>6}"
                f"{'—' if exposed is None else format(exposed * 1e3, '.1f'):>11}"
                f"{'—' if util is None else format(util, '.0%'):>9}  {r['bound_by'] or '—':<14}{link}"
            )
    lines.append("projection rows are model figures from the ceilings above, not measurements")
    return "\n".join(lines)
