"""The results schema contract (issue 42): bench/results/schema.py is the one place a results column is
named; the store and the frame sit above it and never reach into the analysis for a column list."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.config.models import Thresholds
from bench.results import schema

ROOT = Path(__file__).resolve().parents[3]
SCHEMA_FILE = ROOT / "bench" / "results" / "schema.py"
# Frozen revisions each name the columns they added then: they must not follow today's schema.
MIGRATIONS = ROOT / "bench" / "store" / "migrations" / "versions"
SCANNED = ("bench", "plugins", "dags")
# Module-level collections of column names that are uses, not definitions: a choice among the columns.
USES = {
    ("bench/analysis/history/changes.py", "WATCHED"): "the figures the change watch follows, with their alert labels",
    ("plugins/scalewatch/web/app.py", "HISTORY_COLUMNS"): "the columns the history page selects from the store",
    ("bench/analysis/history/overview.py", "COLUMNS"): "the columns an overview line is judged from",
    ("plugins/scalewatch/web/api.py", "POINT_COLUMNS"): "the columns /api/series/{id}/points answers with",
    ("plugins/scalewatch/web/api.py", "RUN_COLUMNS"): "the columns /api/runs/{id} answers with",
}
SQL_DTYPE = {sa.Integer: "int", sa.Float: "float", sa.Boolean: "bool", sa.Text: "text"}


def _dtype(sql_type) -> str:
    for cls, name in SQL_DTYPE.items():
        if isinstance(sql_type, cls):
            return name
    affinity = str(sql_type).upper()  # a reflected type
    for word, name in (("INT", "int"), ("BOOL", "bool"), ("CHAR", "text"), ("TEXT", "text")):
        if word in affinity:
            return name
    return "float" if any(w in affinity for w in ("FLOAT", "REAL", "DOUBLE", "NUMERIC")) else affinity


def _declared(name: str, dtype: str) -> None:
    assert name in schema.NAMES, f"the store's column {name!r} is not declared in bench/results/schema.py"
    column = schema.column(name)
    assert column.stored, f"{name!r}: the store has it, the schema says it is not stored"
    assert column.dtype == dtype, f"{name!r}: stored as {dtype}, declared {column.dtype}"
    assert column.unit in schema.UNITS, f"{name!r}: unit {column.unit!r} is not one of schema.UNITS"


def test_every_column_of_the_store_table_is_declared_with_its_dtype_and_unit():
    from bench.store.tables import results_table

    for c in results_table.columns:
        _declared(c.name, _dtype(c.type))
    assert [c.name for c in results_table.columns] == list(schema.STORED)
    assert [c.name for c in results_table.primary_key.columns] == list(schema.STORE_KEY)


def test_every_column_a_migrated_store_creates_is_declared(tmp_path):
    """What Alembic's revisions create, not only what the metadata says: the two agree with the schema."""
    from bench.store.db import ResultsStore

    store = ResultsStore(f"sqlite:///{tmp_path}/r.db")
    try:
        created = sa.inspect(store.engine).get_columns("results")
    finally:
        store.engine.dispose()
    for c in created:
        _declared(c["name"], _dtype(c["type"]))
    assert {c["name"] for c in created} == set(schema.STORED)


def test_every_declaration_is_complete_and_its_bounds_name_real_thresholds():
    fields = set(Thresholds.model_fields)
    for c in schema.RESULT_COLUMNS:
        assert c.dtype in schema.DTYPES and c.unit in schema.UNITS, c
        if c.bound is not None:
            assert c.bound.figure in schema.NAMES and c.bound.side in ("min", "max"), c
            assert c.bound.threshold is None or c.bound.threshold in fields, c
        if c.held_to is not None:  # a figure held to a threshold directly: its own column, a real field
            assert c.held_to.figure == c.name and c.held_to.side in ("min", "max"), c
            assert c.held_to.threshold in fields, c
    assert len(schema.BY_NAME) == len(schema.RESULT_COLUMNS), "a column is declared twice"
    for group in (
        schema.KEY,
        schema.SERIES_KEY,
        schema.METRICS,
        schema.COLUMNS,
        schema.CEILING_FLOATS,
        schema.CEILING_LABELS,
        schema.DIFFERENTIAL_FIGURES,
        schema.DIFFERENTIAL_LABELS,
        schema.SIZING_FLOATS,
        schema.SIZING_COUNTS,
        tuple(schema.PROBE_FIELDS),
    ):
        assert set(group) <= schema.NAMES
    assert schema.BOUNDS["min_scaling_efficiency"].figure == "scaling_efficiency"
    table = Thresholds(min_scaling_efficiency_by_gpus={16: 0.9, 32: 0.8})
    assert schema.scaling_bound(table, 8) == 0.9 and schema.scaling_bound(table, 64) == 0.8


LIST_MODULES = ("analysis/frame.py", "analysis/verdict/ceilings.py", "analysis/verdict/differential.py")
LIST_MODULES += ("analysis/verdict/sizing.py", "analysis/verdict/bottleneck.py", "analysis/history/annotations.py")
LIST_MODULES += ("train/slots.py",)  # its bench.slots re-exports too


def test_the_modules_that_used_to_define_the_lists_hand_on_the_schemas():
    """The lists they once defined are the schema's: what they use they import from it, and none of them
    assigns a column list of its own (nor re-exports one for tests alone, issue 52)."""
    from bench.analysis import frame
    from bench.analysis.verdict import differential, sizing

    assert (frame.METRICS, frame.COLUMNS) == (schema.METRICS, schema.COLUMNS)
    assert (differential.FIGURES, differential.LABELS) == (schema.DIFFERENTIAL_FIGURES, schema.DIFFERENTIAL_LABELS)
    assert (sizing.SIZING_FLOATS, sizing.SIZING_COUNTS) == (schema.SIZING_FLOATS, schema.SIZING_COUNTS)
    lists = {n for n, v in vars(schema).items() if n.isupper() and isinstance(v, tuple)}
    for rel in LIST_MODULES:
        tree = ast.parse((ROOT / "bench" / rel).read_text())
        assigned = {
            t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)
        }
        assert not assigned & lists, f"bench/{rel} defines {sorted(assigned & lists)}: import the schema's"
        reexports = [
            a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names if a.asname == a.name
        ]
        assert not reexports, f"bench/{rel} re-exports {reexports} (`import x as x`): import them where they live"


def _modules(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (ROOT / root).rglob("*.py") if ".venv" not in p.parts)


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, at any depth (function-level imports included)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return out


def test_the_store_imports_nothing_from_the_analysis():
    for path in _modules("bench/store"):
        wrong = [m for m in _imports(path) if m == "bench.analysis" or m.startswith("bench.analysis.")]
        assert not wrong, f"{path.relative_to(ROOT)} imports {wrong}"


def test_the_frame_imports_nothing_from_the_verdict():
    wrong = [m for m in _imports(ROOT / "bench/analysis/frame.py") if m.startswith("bench.analysis.verdict")]
    assert not wrong, f"bench/analysis/frame.py imports {wrong}"


def test_the_schema_imports_only_config_errors_and_the_standard_library():
    for path in _modules("bench/results"):
        for name in _imports(path):
            top = name.split(".")[0]
            allowed = name.startswith(("bench.config", "bench.errors", "bench.results")) or name == "bench"
            assert allowed or (top != "bench" and top in sys.stdlib_module_names), (
                f"{path.relative_to(ROOT)} imports {name}"
            )


def _strings(node: ast.expr) -> list[str] | None:
    """The string literals of a tuple/list/set literal (or tuple(...)/frozenset(...) of one), or a dict
    literal's string keys; None for anything else. Starred parts (`*KEY`) are another name's: skipped."""
    collection = ("tuple", "list", "set", "frozenset")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in collection:
        return _strings(node.args[0]) if len(node.args) == 1 else None
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elts = [e for e in node.elts if not isinstance(e, ast.Starred)]
    elif isinstance(node, ast.Dict):
        elts = [k for k in node.keys if k is not None]
    else:
        return None
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
        return None
    return [e.value for e in elts]


def column_lists(path: Path) -> list[tuple[str, list[str]]]:
    """(name, strings) of each module-level constant whose value is a collection of at least three string
    literals that are all results columns: a list of columns defined outside the schema."""
    found = []
    for stmt in ast.parse(path.read_text(), str(path)).body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        names = _strings(value)
        if names and len(names) >= 3 and set(names) <= schema.NAMES:
            found += [(ast.unparse(t), names) for t in targets]
    return found


def test_no_module_but_the_schema_defines_a_list_of_results_columns():
    offenders, uses = [], set()
    for path in _modules(*SCANNED):
        if path == SCHEMA_FILE or path.is_relative_to(MIGRATIONS):
            continue
        rel = path.relative_to(ROOT).as_posix()
        for name, names in column_lists(path):
            if (rel, name) in USES:
                uses.add((rel, name))
            else:
                offenders.append(f"{rel}: {name} = {names}")
    assert not offenders, "results columns listed outside bench/results/schema.py:\n" + "\n".join(offenders)
    assert uses == set(USES), f"stale entries in USES: {set(USES) - uses}"


@pytest.mark.parametrize(
    "source, found",
    [
        ('KEY = ("suite_run_id", "workload", "gpus")', True),
        ('COLUMNS = (*KEY, "state", "valid", "throughput_img_s")', True),
        ('_TEXT = {"config_key", "launcher", "cluster"}', True),
        ('FIELDS = {"allreduce_s": "seconds", "allreduce_bytes": "bytes", "allreduce_bus_gb_s": "x"}', True),
        ('F: tuple[str, ...] = tuple(["au", "gpu_util", "cpu_util"])', True),
        ('CHANGE_KEY = ("cluster", "workload", "gpus", "config_key", "metric", "changed_at")', False),
        ('PAIR = ("workload", "gpus")', False),
        ('PHASES = ("data_wait", "compute", "comm")', False),
    ],
)
def test_the_scan_finds_a_column_list_and_only_one(tmp_path, source, found):
    path = tmp_path / "m.py"
    path.write_text(source + "\n")
    assert bool(column_lists(path)) is found


def test_run_variants_and_the_real_models_layouts_are_written_once():
    """A scale's extra runs are named in the schema alone (REPEAT and the node ceiling's variant were each
    written twice, in the suite's plan and the verdict), and the real models' dataset trees in
    bench.workloads.spec.REAL_LAYOUT alone (bench.suite.plan kept a copy)."""
    from bench.workloads.spec import REAL_LAYOUT

    variants = {schema.INDEPENDENT, schema.REPEAT, schema.WARM, schema.SYNTHETIC}
    twice = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.parse(path.read_text(), rel).body:
            if not isinstance(node, ast.Assign):
                continue
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            if rel != "bench/results/schema.py" and value in variants:
                twice.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            if rel != "bench/workloads/spec.py" and isinstance(node.value, ast.Dict):
                try:
                    if ast.literal_eval(node.value) == REAL_LAYOUT:
                        twice.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                except ValueError:
                    pass
    assert not twice, "written again (import it): " + "; ".join(twice)
