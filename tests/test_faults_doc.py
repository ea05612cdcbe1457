"""Every test docs/faults.md names exists (issue 51: rows named tests that had been renamed or removed).

A row's last column names tests in backticks: `tests/x/test_y.py::test_z`, a file alone, `test_y.py::test_z`
(a file named once in tests/), `::test_w` (the file named before it in the row), a glob of names
(`::test_a_read_only_store_*`), a parametrize id after the name or alone (`[ddp]`: the test named before
it), a class (`::TestX::test_z`). Each must be a test file in tests/ defining that test function. Other
backticked words (a fixture, a function of bench/) are prose. "same" / "same test" is the row above's.
A row naming no test says so ("—", "not yet a test") and is listed in UNTESTED, so a new one is seen."""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULTS = ROOT / "docs" / "faults.md"
REF = re.compile(r"^(?P<file>[\w/.-]*\.py)?(?P<names>(?:::[\w*]+)*)(?P<id>\[[^\]]*\])?$")
SAME = ("same", "same test")
# Rows whose test column names no test, and why: what a test cannot reach here.
UNTESTED = {
    "3": "retries=0 is a setting of the DAG, not a behaviour a fault shows",
    "5": "needs a machine where Horovod does not import",
    "104": "by construction (the free space is read before any write)",
}


def rows() -> list[tuple[int, str, str]]:
    """(line number, row number, test column) of each row of the matrix."""
    out = []
    for at, line in enumerate(FAULTS.read_text().splitlines(), 1):
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) >= 5 and cells[0].isdigit():
            out.append((at, cells[0], cells[-1]))
    return out


@functools.cache
def files_by_name() -> dict[str, list[Path]]:
    by_name: dict[str, list[Path]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        by_name.setdefault(path.name, []).append(path)
    return by_name


@functools.cache
def defined(path: Path) -> frozenset[str]:
    """'test_x' and 'TestY::test_x' for each function of the file."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{f.name}" for f in node.body if isinstance(f, ast.FunctionDef)}
    return frozenset(names)


def is_test_ref(ref: str) -> bool:
    return ".py" in ref or ref.startswith(("::", "["))


def untested(column: str) -> bool:
    return column.startswith("—") or "not yet a test" in column


def problems(column: str) -> list[str]:
    """What is wrong with the tests a test column names ([] when each exists)."""
    refs = [r for r in re.findall(r"`([^`]+)`", column) if is_test_ref(r)]
    if not refs:
        return [f"names no test (path.py::test_name in backticks): {column!r}"]
    found, file, name = [], None, ""
    for ref in refs:
        m = REF.match(ref)
        if not m or not (m["file"] or m["names"] or m["id"]):
            found.append(f"`{ref}` is not a test name (path.py::test_name)")
            continue
        if m["file"]:
            if "/" in m["file"]:
                file = ROOT / m["file"] if (ROOT / m["file"]).is_file() else None
                if file is None:
                    found.append(f"`{ref}`: no file {m['file']}")
                    continue
            else:
                candidates = files_by_name().get(m["file"], [])
                if len(candidates) != 1:
                    found.append(f"`{ref}`: {len(candidates)} files named {m['file']} in tests/ (give its path)")
                    file = None
                    continue
                file = candidates[0]
            name = ""
        elif file is None:
            found.append(f"`{ref}`: no file named before it in the row")
            continue
        if m["names"]:
            name = m["names"].removeprefix("::")
        elif m["id"] and not name:
            found.append(f"`{ref}`: a parametrize id with no test named before it")
            continue
        if name and not fnmatch.filter(defined(file), name):
            found.append(f"`{ref}`: {file.relative_to(ROOT)} defines no {name}")
    return found


def matrix_problems() -> list[str]:
    wrong, before = [], ""
    for at, number, column in rows():
        if column in SAME:
            column = before
        if untested(column):
            if number not in UNTESTED:
                wrong.append(f"line {at} (row {number}) names no test: {column!r}")
            before = column
            continue
        wrong += [f"line {at} (row {number}): {p}" for p in problems(column)]
        before = column
    return wrong


def test_every_test_the_fault_matrix_names_exists():
    assert len(rows()) > 100  # the matrix was read
    wrong = matrix_problems()
    assert not wrong, "\n".join(wrong)


def test_the_rows_that_name_no_test_are_the_listed_ones():
    assert {number for _, number, column in rows() if untested(column)} == set(UNTESTED)


def test_a_stale_name_is_found():
    """The check itself: a removed test, a missing file, a stray id and a column of prose are each reported."""
    me = "tests/test_faults_doc.py"
    assert problems(f"`{me}::test_a_stale_name_is_found`, `[x]`, `::test_a_*` (the `cluster` fixture)") == []
    assert problems(f"`{me}::test_gone`") == [f"`{me}::test_gone`: {me} defines no test_gone"]
    assert problems("`tests/nowhere.py`") == ["`tests/nowhere.py`: no file tests/nowhere.py"]
    assert problems("`test_faults_doc.py::test_a_stale_name_is_found`, `::test_gone[x]`") == [
        f"`::test_gone[x]`: {me} defines no test_gone"
    ]
    assert problems(f"`{me}`, `[x]`") == ["`[x]`: a parametrize id with no test named before it"]
    assert problems("the `cluster` fixture") == [
        "names no test (path.py::test_name in backticks): 'the `cluster` fixture'"
    ]
