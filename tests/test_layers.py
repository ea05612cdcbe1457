"""Import layers (issue 42): which parts of the code may import which, read from the source with `ast`,
so an import inside a function or under TYPE_CHECKING counts as much as one at the top of a module.

- bench.metrics, bench.data and bench.storage import nothing from bench.train (they take a bench.collective.Collective
  and read slot facts from bench.slots);
- bench.store imports nothing from bench.analysis;
- bench.config and bench.errors import no other bench module (bench.config may use bench.errors);
- nothing under bench/ imports the Airflow side (plugins/, dags/).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Each tree and the directory its modules are imported from (plugins/ and dags/ are on Airflow's path).
TREES = {"bench": ROOT, "plugins": ROOT / "plugins", "dags": ROOT / "dags"}


def module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, module: str) -> set[str]:
    """Every module `path` imports, anywhere in it: `import a.b` gives a.b; `from a import b` gives a
    and a.b (b may be a submodule); relative imports are resolved against `module`."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return out


def scan() -> dict[str, set[str]]:
    modules: dict[str, set[str]] = {}
    for tree, base in TREES.items():
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "__pycache__" not in path.parts:
                modules[module_name(path, base)] = imported(path, module_name(path, base))
    return modules


MODULES = scan()


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def offenders(importers: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    """`module imports target` for each forbidden import (`from a import b` named once, as a)."""
    out = []
    for module, targets in MODULES.items():
        if any(within(module, p) for p in importers):
            hits = {t for t in targets if any(within(t, f) for f in forbidden)}
            out += [f"{module} imports {t}" for t in hits if t.rpartition(".")[0] not in hits]
    return sorted(out)


def test_the_scan_sees_every_tree_and_imports_inside_functions():
    assert {"bench.train.loop", "bench.metrics.summary", "scalewatch_plugin", "scaling_regression"} <= set(MODULES)
    assert "bench.metrics.summary" in MODULES["bench.train.loop"]
    assert "bench.train.slots" in MODULES["bench.launch.detached"]  # imported inside a method
    assert "bench.train.dist.base" in MODULES["bench.train.dist"]  # under TYPE_CHECKING and in __getattr__


def test_metrics_data_and_storage_import_nothing_from_train():
    assert offenders(("bench.metrics", "bench.data", "bench.storage"), ("bench.train",)) == []


def test_store_imports_nothing_from_analysis():
    assert offenders(("bench.store",), ("bench.analysis",)) == []


@pytest.mark.parametrize(("module", "allowed"), [("bench.config", ("bench.errors",)), ("bench.errors", ())])
def test_config_and_errors_import_no_other_bench_module(module, allowed):
    own = {p.stem for p in (ROOT / "bench").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    others = tuple(f"bench.{name}" for name in sorted(own) if f"bench.{name}" not in (module, *allowed))
    assert offenders((module,), others) == []


def test_bench_imports_nothing_from_plugins_or_dags():
    airflow_side = {"plugins", "dags"} | {
        p.stem for tree in ("plugins", "dags") for p in (ROOT / tree).iterdir() if p.suffix == ".py" or p.is_dir()
    } - {"__pycache__"}
    assert offenders(("bench",), tuple(sorted(airflow_side))) == []


def import_cycles(modules: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import each other, directly or round a loop (Tarjan's strongly connected
    components over every import, a function's own included: a lazy import is still a loop in the design).
    A module's edge to its own package is left out: Python imports a module's parents before it anyway,
    so `from bench.cli import data` inside bench.cli.main is no loop of its making."""
    graph = {
        m: sorted(t for t in targets if t in modules and t != m and not within(m, t)) for m, targets in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle():
    """Data flows one way: no two modules import each other, anywhere in them (issue 52: bench.suite.run
    and bench.suite.stage_node did, inside functions)."""
    assert import_cycles(MODULES) == [], "import cycles (move what both need below them)"


def test_the_cycle_check_sees_a_lazy_loop_and_passes_a_package_importing_its_children():
    loop = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert import_cycles(loop) == [["a.x", "a.y", "a.z"]]
    assert import_cycles({"p": {"p.main"}, "p.main": {"p", "p.data"}, "p.data": set()}) == []
