"""`bench sweep`: the whole suite without Airflow (stage, launch each scale, evaluate, store, report).

Its --config file holds the same settings, by the same names, as a suite file and the DAG's form
(bench.config.SuiteSettings); flags override single settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench.config.defaults import EMBEDDED_DEFAULT
from bench.config.models import TrainingSettings, WhereSettings
from bench.config.settings import environment_defaults, settings_from
from bench.config.types import RUN_ID_RE, choices_of
from bench.errors import ConfigError

# flag -> setting; list-valued settings take a comma list
FLAG_SETTINGS = (
    "workloads",
    "gpus",
    "launcher",
    "dataset_path",
    "dataset_images",
    "steps",
    "batch_size",
    "image_size",
    "loader",
    "min_scaling_efficiency",
)


def add_parsers(sub) -> None:
    s = sub.add_parser("sweep", help="run the suite once end to end (exit 0 pass, 1 scaling fails)")
    s.add_argument("--config", type=Path, help="YAML or JSON file of suite settings (a suite file's fields)")
    s.add_argument(
        "--workloads", help="comma list of built-ins (bench workloads list) or workload files' absolute paths"
    )
    s.add_argument("--gpus", help="comma list of rank counts, e.g. 1,2")
    s.add_argument("--launcher", choices=choices_of(WhereSettings, "launcher"))
    s.add_argument("--dataset-path", type=Path)
    s.add_argument("--dataset-images", type=int)
    s.add_argument("--steps", type=int)
    s.add_argument("--batch-size", type=int)
    s.add_argument("--image-size", type=int)
    s.add_argument("--loader", choices=choices_of(TrainingSettings, "loader"))
    s.add_argument("--results-url", help="results store (default $SCALEWATCH_RESULTS_URL, then SQLite)")
    s.add_argument("--output-dir", type=Path)
    s.add_argument("--suite-run-id", help="names the run folder and the stored rows (letters, digits, _.:+-)")
    s.add_argument("--min-scaling-efficiency", type=float)
    s.set_defaults(func=_sweep)


def read_config_file(path: Path) -> dict:
    """A --config file's settings (YAML, of which JSON is a subset); unknown names are refused later."""
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError(f"--config {path}: {error}") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"--config {path}: must be a mapping of setting: value")
    doc.pop("schedule", None)  # a suite file works as a --config file
    doc.pop("description", None)
    return {str(k): v for k, v in doc.items()}


def settings_values(args: argparse.Namespace, home: Path) -> dict:
    """Embedded default < environment < --config file < flags, as setting names."""
    values = dict(EMBEDDED_DEFAULT) | environment_defaults(home, os.environ.get("SCALEWATCH_CLUSTER"))
    if args.config:
        values = environment_defaults(home, os.environ.get("SCALEWATCH_CLUSTER")) | read_config_file(args.config)
    for name in FLAG_SETTINGS:
        value = getattr(args, name)
        if value is None:
            continue
        if name in ("workloads", "gpus"):
            items = [v.strip() for v in value.split(",") if v.strip()]
            try:
                value = [int(v) for v in items] if name == "gpus" else items
            except ValueError:
                raise ConfigError(f"--gpus: {value!r} must be a comma list of whole numbers") from None
        elif isinstance(value, Path):
            value = str(value.absolute())
        values[name] = value
    return values


def _sweep(args: argparse.Namespace) -> int:
    from bench.suite.sweep import sweep

    if args.suite_run_id is not None and not RUN_ID_RE.fullmatch(args.suite_run_id):
        raise ConfigError(f"--suite-run-id {args.suite_run_id!r}: must match {RUN_ID_RE.pattern} (it names a folder)")
    base = Path.cwd() / "scalewatch-home"
    settings = settings_from(settings_values(args, base))
    output_dir = args.output_dir.absolute() if args.output_dir else base / "runs"
    cfg = settings.sweep_config(base, output_dir)
    store_url = args.results_url or os.environ.get("SCALEWATCH_RESULTS_URL")
    if not store_url:  # the default store's folder, which --output-dir elsewhere never creates
        base.mkdir(parents=True, exist_ok=True)
        store_url = f"sqlite:///{base / 'results.db'}"
    outcome = sweep(cfg, store_url, args.suite_run_id, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(outcome, indent=2))
    print(f"verdict: {outcome['verdict']}; report: {outcome['report']}")  # INCONCLUSIVE is not FAILED
    return 0 if outcome["passed"] else 1
