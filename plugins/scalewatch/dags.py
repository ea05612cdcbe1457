"""The scalewatch DAGs, declared into a DAG file's namespace, so that a checkout's `dags/` and an Airflow that
installed scalewatch as a package (docs/deploy.md) load the same DAGs. The package's one line, in any file of
that Airflow's dags folder (the words "airflow" and "DAG" let its safe-mode discovery parse the file):

    from scalewatch.dags import declare; declare(globals())  # airflow DAGs: scalewatch

`declare` does its work at every call, never once per import: a module import is cached, and a parse in a
process that imported it before would miss a suite file added since.
"""

from __future__ import annotations

import os

# The cron of the embedded default suite: weekly, Monday 03:00 UTC; SCALEWATCH_SCHEDULE overrides, "none" turns
# the schedule off.
WEEKLY = "0 3 * * 1"

EMBEDDED_DOC = """The embedded default suite: the weekly scaling regression on this Airflow's own settings.

Suite files (one per cluster or storage system) become DAGs of their own (`scalewatch.dags.declare_suites`).
"""


def declare(namespace: dict) -> None:
    """Every scalewatch DAG: the embedded default and one per suite file of SCALEWATCH_SUITES."""
    declare_embedded(namespace)
    declare_suites(namespace)


def declare_embedded(namespace: dict) -> None:
    """The embedded default suite, `scaling_regression`, on the weekly cron (SCALEWATCH_SCHEDULE)."""
    from bench.config.defaults import EMBEDDED_DEFAULT
    from scalewatch.dag_factory import build
    from scalewatch.params import params

    schedule = os.environ.get("SCALEWATCH_SCHEDULE", WEEKLY)
    namespace["scaling_regression"] = build(
        "scaling_regression",
        None if schedule.lower() in ("", "none") else schedule,
        params(EMBEDDED_DEFAULT),
        EMBEDDED_DOC,
    )


def declare_suites(namespace: dict) -> None:
    """One DAG per suite file (`$SCALEWATCH_SUITES/NAME.yaml` -> `scaling_regression__NAME`).

    The folder is read once per parse (small YAML files, no heavy imports). A file that does not validate,
    or whose DAG cannot be built, becomes an import error naming the file, and the other suites still load:
    nothing one file holds may raise out of here.
    """
    from bench.suite_files import load_suites
    from scalewatch import paths
    from scalewatch.dag_factory import InvalidSuiteDag, build
    from scalewatch.params import check_suite_values, params

    suites, errors = load_suites(paths.suites_dir(), check_suite_values)
    for suite in suites:
        name = suite_dag_id(suite.name)
        try:
            namespace[name] = build(
                name, suite.schedule, params(suite.defaults), suite.description or f"Suite {suite.path}"
            )
        except Exception as error:  # one suite's DAG failing to build must not take the others
            errors[suite.path] = f"{suite.path}: cannot build its DAG ({type(error).__name__}: {str(error)[:300]})"
    # Airflow keeps one import error per Python file: each invalid suite reports every bad file.
    report = "\n".join(errors.values())
    for path in errors:
        namespace[error_dag_id(path)] = InvalidSuiteDag(error_dag_id(path), report)


def suite_dag_id(name: str) -> str:
    from bench.suite_files import dag_id

    return dag_id(name)


def error_dag_id(path) -> str:
    """The suite's own DAG id where its file name makes a valid one, else one no suite can have (suite names
    start with a letter or digit), so a bad name never breaks the error's DAG."""
    from bench.suite_files import SUITE_NAME_RE, SUITE_SUFFIXES

    ok = path.suffix in SUITE_SUFFIXES and SUITE_NAME_RE.fullmatch(path.stem)
    return suite_dag_id(path.stem if ok else "_invalid")
