"""Results from the nodes are input from another machine (issue 48, item 4): checked strictly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.storage.fio_probe import ProbeError
from bench.suite.node_probe import MAX_REASON_CHARS, ClimbDoc, NodeOutput, ShareDoc, node_doc
from bench.suite.stage_node import StagingDoc
from tests.bench.suite.test_probe_guards import share_doc

LEVEL = {"jobs": 1, "mb_s": 100.0, "bytes": 1 << 20, "seconds": 1.0, "fresh": True}
CLIMB = {"ceiling_mb_s": 100.0, "levels": [LEVEL], "repeat": LEVEL, "conclusive": True, "reason": "", "extra": {}}
STAGED = {"ssd": {"path": "/data/ssd", "files": 3, "bytes": 300, "copied": 3, "skipped": 0}}


def out(text: str) -> NodeOutput:
    return NodeOutput("n1", 0, text + "\n", "")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_anywhere_in_a_nodes_result_is_refused_naming_the_node(constant):
    """json.loads takes NaN; a NaN passed as a float and crashed write_probe's strict JSON later."""
    marked = (CLIMB | {"ceiling_mb_s": "X"}, share_doc("a", mb_s="X"), {"ssd": STAGED["ssd"] | {"skipped": "X"}})
    for doc, model in zip(marked, (ClimbDoc, ShareDoc, StagingDoc), strict=True):
        text = json.dumps(doc).replace('"X"', constant)
        with pytest.raises(ProbeError, match=f"node n1: {constant} is not a number a result may hold"):
            node_doc(out(text), model=model)
    kept = json.dumps(CLIMB | {"extra": {"note": 1}, "also": float("nan")})  # an extra key holding NaN
    with pytest.raises(ProbeError, match="NaN is not a number"):
        node_doc(out(kept), model=ClimbDoc)


@pytest.mark.parametrize(
    "change,field",
    [
        ({"host": "a b"}, "host"),
        ({"host": "node\nMatch exec x"}, "host"),
        ({"host": "x" * 300}, "host"),
        ({"method": "direct; rm -rf /"}, "method"),
        ({"mb_s": -1.0}, "mb_s"),
        ({"mb_s": 1e300}, "mb_s"),
        ({"jobs": 0}, "jobs"),
        ({"started_at": 1e20}, "started_at"),
    ],
)
def test_a_share_result_out_of_shape_is_refused_naming_the_field(change, field):
    with pytest.raises(ProbeError, match=f"node n1: result field '{field}'"):
        node_doc(out(json.dumps(share_doc("a") | change)), model=ShareDoc)


def test_a_climb_result_with_an_overlong_reason_or_extra_is_refused():
    with pytest.raises(ProbeError, match="result field 'reason'"):
        node_doc(out(json.dumps(CLIMB | {"reason": "x" * (MAX_REASON_CHARS + 1)})), model=ClimbDoc)
    with pytest.raises(ProbeError, match="result field 'extra'"):
        node_doc(out(json.dumps(CLIMB | {"extra": {str(i): i for i in range(100)}})), model=ClimbDoc)
    assert node_doc(out(json.dumps(CLIMB)), model=ClimbDoc)["ceiling_mb_s"] == 100.0


@pytest.mark.parametrize(
    "doc,field",
    [
        ({"ssd": STAGED["ssd"] | {"path": "/data/x\nMatch exec y"}}, r"ssd\.path"),
        ({"ssd": STAGED["ssd"] | {"files": -1}}, r"ssd\.files"),
        ({"ssd": STAGED["ssd"] | {"planted": 1}}, r"ssd\.planted"),
        ({"a b": STAGED["ssd"]}, r"a b\.\[key\]"),
        ({"ssd": "done"}, "ssd"),
    ],
)
def test_a_staging_result_out_of_shape_is_refused_naming_the_field(doc, field):
    with pytest.raises(ProbeError, match=f"staging on node n1: result field '{field}'"):
        node_doc(out(json.dumps(doc)), "staging", StagingDoc)


def test_what_a_node_really_prints_after_staging_passes_the_model(tmp_path):
    """The model is what stage_node prints: a real staging of a small dataset, read back through it."""
    argv = [sys.executable, "-m", "bench.suite.stage_node", "--dataset-path", str(tmp_path / "data")]
    argv += ["--images", "8", "--seed", "0", "--workload", "ssd"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    staged = node_doc(NodeOutput("n1", 0, done.stdout, done.stderr), "staging", StagingDoc)
    assert set(staged) == {"ssd"} and staged["ssd"]["files"] >= 8


def test_the_probe_document_is_not_written_through_a_planted_link(tmp_path):
    from bench.suite.node_probe import write_probe

    victim = tmp_path / "victim"
    victim.write_text("theirs\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / ".probe.json.tmp").symlink_to(victim)
    write_probe(out, {"ceiling_mb_s": 1.0}, "probe.json")
    assert victim.read_text() == "theirs\n"
    assert json.loads((out / "probe.json").read_text()) == {"ceiling_mb_s": 1.0}
