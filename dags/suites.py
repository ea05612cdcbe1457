"""One Airflow DAG per suite file (`$SCALEWATCH_SUITES/NAME.yaml` -> `scaling_regression__NAME`).

The folder is read once per parse (small YAML files, no heavy imports). A file that does not
validate becomes an import error naming the file and the field, and the other suites still load.
"""

from __future__ import annotations

from bench.suites import dag_id, load_suites
from scalewatch import paths
from scalewatch.dag_factory import InvalidSuiteDag, build
from scalewatch.params import check_suite_values, params

_suites, _errors = load_suites(paths.suites_dir(), check_suite_values)
for _suite in _suites:
    globals()[dag_id(_suite.name)] = build(
        dag_id(_suite.name), _suite.schedule, params(_suite.defaults), _suite.description or f"Suite {_suite.path}"
    )
# Airflow keeps one import error per Python file: each invalid suite reports every bad file.
_report = "\n".join(_errors.values())
for _path in _errors:
    globals()[dag_id(_path.stem)] = InvalidSuiteDag(dag_id(_path.stem), _report)
