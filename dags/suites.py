"""One Airflow DAG per suite file (`$SCALEWATCH_SUITES/NAME.yaml` -> `scaling_regression__NAME`).

The folder is read once per parse (small YAML files, no heavy imports). A file that does not
validate, or whose DAG cannot be built, becomes an import error naming the file, and the other
suites still load: nothing one file holds may raise out of this module.
"""

from __future__ import annotations

from bench.suite_files import SUITE_NAME_RE, SUITE_SUFFIXES, dag_id, load_suites
from scalewatch import paths
from scalewatch.dag_factory import InvalidSuiteDag, build
from scalewatch.params import check_suite_values, params

_suites, _errors = load_suites(paths.suites_dir(), check_suite_values)
for _suite in _suites:
    try:
        globals()[dag_id(_suite.name)] = build(
            dag_id(_suite.name), _suite.schedule, params(_suite.defaults), _suite.description or f"Suite {_suite.path}"
        )
    except Exception as _error:  # one suite's DAG failing to build must not take the others
        _errors[_suite.path] = f"{_suite.path}: cannot build its DAG ({type(_error).__name__}: {str(_error)[:300]})"


def _error_dag_id(path) -> str:
    """The suite's own DAG id where its file name makes a valid one, else one no suite can have
    (suite names start with a letter or digit), so a bad name never breaks the error's DAG."""
    ok = path.suffix in SUITE_SUFFIXES and SUITE_NAME_RE.fullmatch(path.stem)
    return dag_id(path.stem if ok else "_invalid")


# Airflow keeps one import error per Python file: each invalid suite reports every bad file.
_report = "\n".join(_errors.values())
for _path in _errors:
    globals()[_error_dag_id(_path)] = InvalidSuiteDag(_error_dag_id(_path), _report)
