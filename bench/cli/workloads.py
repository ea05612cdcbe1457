"""`bench workloads list` and `bench workloads check FILE`: the built-in workloads, and a workload file
validated as a suite will read it (exit 0 valid; 2 invalid, naming the field)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parsers(sub) -> None:
    p = sub.add_parser("workloads", help="workload files: list the built-ins, check a file")
    inner = p.add_subparsers(dest="workloads_command", required=True, parser_class=type(p))
    lst = inner.add_parser("list", help="the built-in workloads and the accelerator profiles they use")
    lst.set_defaults(func=_cmd_list)
    check = inner.add_parser("check", help="validate a workload file (exit 2 naming the field when invalid)")
    check.add_argument("file", type=Path)
    check.set_defaults(func=_cmd_check)


def _describe(name: str, resolved) -> str:
    spec = resolved.spec
    data = spec.dataset
    if data.layout != "records":
        shape = f"{data.layout} tree (generated)"
    elif data.path is not None:
        shape = f"{data.format or 'detected'} files in {data.path}"
    else:
        shape = f"{data.files} {data.format} files x {data.samples_per_file}, {data.record_bytes.mean} B"
    if not spec.emulated:
        return f"{name:<20} real {spec.compute.model:<14} {shape}"
    demand = resolved.batch_size * (data.record_bytes.mean if data.record_bytes else 0) / resolved.seconds_per_batch
    return (
        f"{name:<20} emulated {resolved.accelerator:<24} {resolved.seconds_per_batch:.5f} s/batch of "
        f"{resolved.batch_size}, min_au {resolved.min_au}, {shape}, {demand / 1e6:.0f} MB/s per accelerator"
    )


def _cmd_list(args: argparse.Namespace) -> int:
    from bench.workloads.accelerators import PROFILES
    from bench.workloads.spec import builtin_names, load

    for name in builtin_names():
        print(_describe(name, load(name)))
    print("\naccelerator profiles:")
    for p in PROFILES.values():
        figure = f"{p.seconds_per_batch} s/batch of {p.batch_size}"
        print(f"  {p.name:<24} {p.accelerator}, {figure}, {p.basis} {p.date}: {p.source}")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from bench.workloads.spec import load_file, resolve

    path = args.file.absolute()
    resolved = resolve(path.stem, load_file(path))
    print(f"{path}: valid\n{_describe(path.stem, resolved)}")
    return 0
