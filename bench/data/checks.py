"""Great Expectations checks on a staged dataset's manifest: no empty files, annotations resolve."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bench.data.stage import load_manifest


def manifest_frame(root: Path) -> pd.DataFrame:
    doc = load_manifest(root)
    return pd.DataFrame([{"path": p, "size": e["size"], "sha256": e["sha256"]} for p, e in doc["files"].items()])


def referenced_files(root: Path) -> list[str]:
    """Files that the dataset's index/annotations point at, relative to root."""
    if (root / "annotations.json").is_file():
        doc = json.loads((root / "annotations.json").read_text())
        return [f"images/{i['file_name']}" for i in doc.get("images", [])]
    if (root / "index.json").is_file():
        doc = json.loads((root / "index.json").read_text())
        return [p for pair in doc.get("pairs", []) for p in pair]
    return []


def check_manifest(root: Path, expect_images: int | None = None) -> dict:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    files = manifest_frame(root)
    refs = pd.DataFrame({"path": referenced_files(root)})
    images = int(files["path"].str.startswith("images/").sum())
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_pandas("manifest")
    results = {}

    def run(name: str, frame: pd.DataFrame, expectations: list) -> None:
        asset = source.add_dataframe_asset(name)
        suite = context.suites.add(gx.ExpectationSuite(name=name))
        for e in expectations:
            suite.add_expectation(e)
        vd = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=asset.add_batch_definition_whole_dataframe("all"), suite=suite)
        )
        for res in vd.run(batch_parameters={"dataframe": frame}).results:
            results[f"{name}.{res.expectation_config.type}"] = bool(res.success)

    E = gx.expectations
    file_checks = [
        E.ExpectColumnValuesToBeBetween(column="size", min_value=1),
        E.ExpectColumnValuesToBeUnique(column="path"),
    ]
    if expect_images is not None:
        images_frame = files[files["path"].str.startswith("images/")]
        run("images", images_frame, [E.ExpectTableRowCountToEqual(value=expect_images)])
    run("files", files, file_checks)
    if not refs.empty:
        run(
            "references",
            refs,
            [E.ExpectColumnValuesToBeInSet(column="path", value_set=files["path"].tolist())],
        )
    failed = [k for k, ok in results.items() if not ok]
    return {"success": not failed, "failed": failed, "images": images, "files": len(files)}
