"""Run the weekly DAG once, end to end, in this process (dag.test), then print verdict and report."""

from __future__ import annotations

import json
import sys


def main() -> int:
    from airflow.dag_processing.dagbag import DagBag

    from bench.store.db import ResultsStore
    from scalewatch import paths

    conf = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    bag = DagBag()
    if bag.import_errors:
        print(f"DAG import errors: {bag.import_errors}", file=sys.stderr)
        return 2
    run = bag.get_dag("scaling_regression").test(run_conf=conf)
    runs = ResultsStore(paths.results_url()).suite_runs()
    mine = runs[runs["suite_run_id"] == run.run_id]
    print(f"dag run {run.run_id}: {run.state}")
    if mine.empty:
        print("verdict: NO RESULT (the run failed before evaluation; see the task output above)")
        return 1
    row = mine.iloc[-1]
    print(f"verdict: {'PASSED' if row['passed'] else 'FAILED'}")
    print(f"report: {row['report_path']}")
    return 0 if row["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
