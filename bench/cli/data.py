"""`bench dataset generate|stage|verify`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.errors import DatasetError

KINDS = ("coco", "segmentation")


def add_parsers(sub) -> None:
    ds = sub.add_parser("dataset", help="generate, stage and verify datasets")
    dsub = ds.add_subparsers(dest="dataset_command", required=True, parser_class=type(ds))
    g = dsub.add_parser("generate", help="write a deterministic synthetic dataset")
    # bench.data.generate.Kind's values, written here because importing that module (numpy, PIL) on every
    # `bench` start is what the CLI avoids; tests/bench/test_defaults_once.py checks the two agree.
    g.add_argument("--kind", required=True, choices=KINDS)
    g.add_argument("--out", required=True, type=Path)
    size = g.add_mutually_exclusive_group(required=True)
    size.add_argument("--images", type=int)
    size.add_argument("--total-bytes", type=int)
    # left out: GenerateSpec's own defaults (read when the command runs, for the same reason)
    g.add_argument("--min-side", type=int, help="default: GenerateSpec's")
    g.add_argument("--max-side", type=int, help="default: GenerateSpec's")
    g.add_argument("--seed", type=int, help="default: GenerateSpec's")
    g.add_argument("--workers", type=int, help="default: GenerateSpec's")
    g.set_defaults(func=_generate)
    s = dsub.add_parser("stage", help="copy onto the storage under test with verification")
    s.add_argument("--from", dest="src", required=True, type=Path)
    s.add_argument("--to", dest="dst", required=True, type=Path)
    s.add_argument("--expect-images", type=int, help="Great Expectations check: images expected")
    s.set_defaults(func=_stage)
    v = dsub.add_parser("verify", help="check a staged tree against its manifest")
    v.add_argument("path", type=Path)
    v.set_defaults(func=_verify)


def _generate(args: argparse.Namespace) -> int:
    from bench.data.generate import GenerateSpec, generate

    spec = GenerateSpec(
        args.kind,
        args.out,
        images=args.images,
        total_bytes=args.total_bytes,
        **{k: getattr(args, k) for k in ("min_side", "max_side", "seed", "workers") if getattr(args, k) is not None},
    )
    print(json.dumps(generate(spec)))
    return 0


def _stage(args: argparse.Namespace) -> int:
    from bench.data.checks import check_manifest
    from bench.data.stage import stage

    result = stage(args.src, args.dst)
    report = check_manifest(args.dst, expect_images=args.expect_images)
    print(
        json.dumps(
            {
                "files": result.files,
                "bytes": result.bytes,
                "copied": result.copied,
                "skipped": result.skipped,
                "manifest": str(result.manifest),
                "checks": report,
            }
        )
    )
    if not report["success"]:
        raise DatasetError(f"{args.dst}: staged, but manifest checks failed: {report['failed']}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from bench.data.stage import verify

    problems = verify(args.path)
    for line in problems:
        print(line)
    if problems:
        raise DatasetError(f"{args.path}: {len(problems)} problem(s) against the manifest")
    print(f"{args.path}: matches its manifest")
    return 0
