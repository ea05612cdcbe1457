"""`bench evaluate` / `bench detect` contracts: output shape and exit codes, run as real processes."""

import json
import subprocess

import numpy as np
import pandas as pd
import pytest

from tests.conftest import BENCH


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=120)


def write(tmp_path, text: str):
    path = tmp_path / "r.csv"
    path.write_text(text)
    return path


def test_evaluate_linear_passes_and_json_shape(tmp_path):
    p = write(
        tmp_path,
        "model,gpus,throughput_img_s,avg_read_mb_s\nssd,4,400,100\nssd,16,1580,395\nssd,32,3150,790\n",
    )
    done = run("evaluate", str(p), "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["passed"] is True
    assert [r["gpus"] for r in doc["rows"]] == [4, 16, 32]
    assert set(doc["rows"][0]) == {
        "model",
        "gpus",
        "scaling_efficiency",
        "bandwidth_efficiency",
        "passed",
        "failed",
    }
    assert doc["rows"][2]["scaling_efficiency"] == pytest.approx(3150 / 400 / 8)


def test_evaluate_scaling_drop_fails_naming_expectation(tmp_path):
    p = write(tmp_path, "model,gpus,throughput_img_s\nssd,4,400\nssd,64,3000\ndeeplab,4,100\ndeeplab,64,1590\n")
    done = run("evaluate", str(p), "--json", "--min-scaling-efficiency", "0.9")
    assert done.returncode == 1
    rows = {(r["model"], r["gpus"]): r for r in json.loads(done.stdout)["rows"]}
    assert rows[("ssd", 64)]["failed"] == ["ExpectScalingEfficiencyAtLeastBound"]
    assert rows[("deeplab", 64)]["passed"] is True


def test_evaluate_from_epoch_time_and_baseline(tmp_path):
    p = write(tmp_path, "model,gpus,epoch_time_s\nssd,4,100\nssd,8,52\nssd,16,40\n")
    doc = json.loads(run("evaluate", str(p), "--json", "--baseline-gpus", "8").stdout)
    eff = {r["gpus"]: r["scaling_efficiency"] for r in doc["rows"]}
    assert eff[16] == pytest.approx(52 / 40 / 2)


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "empty"),
        ("model,throughput_img_s\nssd,1\n", "'gpus'"),
        ("model,gpus\nssd,1\nssd,2\n", "throughput_img_s"),
        ("model,gpus,throughput_img_s\nssd,1,10\nssd,two,20\n", "column 'gpus' row 3"),
        ("model,gpus,throughput_img_s\nssd,1,10\nssd,0,20\n", "row 3"),
        ("model,gpus,throughput_img_s\nssd,1,10\nssd,1,20\n", "duplicate"),
        ("model,gpus,throughput_img_s\nssd,1,10\n", "one scale only"),
        ("model,gpus,throughput_img_s\nssd,1,10\nssd,2,fast\n", "column 'throughput_img_s' row 3"),
        ("model,gpus,throughput_img_s\nssd,1,100\nssd,2,\n", "column 'throughput_img_s' row 3: empty"),
        ("model,gpus,throughput_img_s\nssd,1,100\nssd,2,inf\n", "column 'throughput_img_s' row 3"),
        ("model,gpus,throughput_img_s,avg_read_mb_s\nssd,1,100,5\nssd,2,200,\n", "column 'avg_read_mb_s' row 3"),
    ],
)
def test_evaluate_bad_input_exit_2(tmp_path, text, needle):
    done = run("evaluate", str(write(tmp_path, text)))
    assert done.returncode == 2
    assert needle in done.stderr


def test_detect_finds_the_step_change(tmp_path):
    rng = np.random.default_rng(0)
    weeks = pd.date_range("2024-01-01", periods=80, freq="W", tz="UTC")
    values = np.r_[rng.normal(1000, 10, 50), rng.normal(800, 10, 30)]
    frame = pd.DataFrame({"timestamp": weeks, "model": "ssd", "gpus": 16, "throughput_img_s": values})
    stable = frame.assign(gpus=32, throughput_img_s=rng.normal(2000, 10, 80))
    path = tmp_path / "h.csv"
    pd.concat([frame, stable]).to_csv(path, index=False)
    done = run("detect", str(path), "--metric", "throughput_img_s", "--json")
    assert done.returncode == 0, done.stderr
    cps = json.loads(done.stdout)["change_points"]
    assert {(c["model"], c["gpus"]) for c in cps} == {("ssd", 16)}  # the stable series has none
    assert all(set(c) == {"model", "gpus", "timestamp", "before", "after", "change", "pvalue"} for c in cps)
    assert all(0 <= c["pvalue"] <= 0.001 for c in cps)
    biggest = min(cps, key=lambda c: c["change"])
    assert biggest["timestamp"].startswith(str(weeks[50].date()))
    assert biggest["change"] == pytest.approx(-0.2, abs=0.03)


def test_detect_bad_input(tmp_path):
    path = write(tmp_path, "timestamp,model,gpus\n2024-01-01,ssd,1\n")
    done = run("detect", str(path), "--metric", "throughput_img_s")
    assert done.returncode == 2 and "'throughput_img_s'" in done.stderr


def test_evaluate_text_mode_prints_the_table_and_exits_by_verdict(tmp_path):
    passing = run("evaluate", str(write(tmp_path, "model,gpus,throughput_img_s\nssd,1,100\nssd,2,198\n")))
    assert passing.returncode == 0, passing.stderr
    assert "Traceback" not in passing.stderr
    lines = passing.stdout.splitlines()
    assert lines[-1] == "PASSED" and any(line.endswith("pass") and " 2 " in line for line in lines)
    failing = run("evaluate", str(write(tmp_path, "model,gpus,throughput_img_s\nssd,1,100\nssd,2,110\n")))
    assert failing.returncode == 1 and failing.stdout.splitlines()[-1] == "FAILED"
    assert "FAIL ExpectScalingEfficiencyAtLeastBound" in failing.stdout


def test_evaluate_json_is_strict_json(tmp_path):
    done = run("evaluate", str(write(tmp_path, "model,gpus,epoch_time_s\nssd,1,100\nssd,2,50\n")), "--json")
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--window", "0"], "--window"),
        (["--window", "-3"], "--window"),
        (["--max-pvalue", "0"], "--max-pvalue"),
        (["--max-pvalue", "2"], "--max-pvalue"),
    ],
)
def test_detect_bad_flags_exit_2(tmp_path, args, needle):
    path = write(tmp_path, "timestamp,model,gpus,x\n2024-01-01,ssd,1,1\n2024-01-08,ssd,1,2\n")
    done = run("detect", str(path), "--metric", "x", *args)
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr


def test_detect_refuses_an_oversized_history(tmp_path):
    from bench.analysis.history.detect import MAX_HISTORY_ROWS

    path = tmp_path / "big.csv"
    with path.open("w") as f:
        f.write("timestamp,model,gpus,x\n")
        f.writelines(f"2024-01-01,ssd,{i % 7 + 1},1\n" for i in range(MAX_HISTORY_ROWS + 1))
    done = run("detect", str(path), "--metric", "x")
    assert done.returncode == 2 and "rows" in done.stderr and str(MAX_HISTORY_ROWS) in done.stderr


def test_per_scale_bounds_fail_exactly_the_rows_they_should(tmp_path):
    # Efficiencies 0.85 at 16, 0.78 at 32, 0.72 at 64 against 0.9 up to 16, 0.8 at 32, 0.7 at 64:
    # 16 and 32 fail, 64 passes; one bound of 0.7 for all would pass every row.
    table = "model,gpus,throughput_img_s\nssd,4,400\nssd,16,1360\nssd,32,2496\nssd,64,4608\n"
    bounds = tmp_path / "bounds.yaml"
    bounds.write_text("min_scaling_efficiency_by_gpus: {16: 0.9, 32: 0.8, 64: 0.7}\n")
    done = run("evaluate", str(write(tmp_path, table)), "--bounds", str(bounds), "--json")
    assert done.returncode == 1, done.stderr
    rows = {r["gpus"]: r for r in json.loads(done.stdout)["rows"]}
    assert rows[16]["failed"] == rows[32]["failed"] == ["ExpectScalingEfficiencyAtLeastBound"]
    assert rows[64]["passed"] and rows[4]["passed"]
    text = run("evaluate", str(write(tmp_path, table)), "--bounds", str(bounds))
    line16 = next(line for line in text.stdout.splitlines() if line.split()[:2] == ["ssd", "16"])
    assert "0.90" in line16 and "FAIL" in line16  # the bound that applied is shown
    one = run("evaluate", str(write(tmp_path, table)), "--min-scaling-efficiency", "0.7", "--json")
    assert one.returncode == 0


def test_a_bounds_file_with_a_bad_value_names_file_and_field(tmp_path):
    bounds = tmp_path / "b.yaml"
    bounds.write_text("min_scaling_efficiency_by_gpus: {16: fast}\n")
    table = write(tmp_path, "model,gpus,throughput_img_s\nssd,1,1\nssd,2,2\n")
    done = run("evaluate", str(table), "--bounds", str(bounds))
    assert done.returncode == 2 and str(bounds) in done.stderr and "min_scaling_efficiency_by_gpus" in done.stderr


def test_detect_online_gives_each_change_point_the_run_that_confirmed_it(tmp_path):
    rng = np.random.default_rng(4)
    weeks = pd.date_range("2024-01-01", periods=60, freq="W", tz="UTC")
    values = np.r_[rng.normal(1000, 15, 45), rng.normal(880, 15, 15)]
    path = tmp_path / "h.csv"
    pd.DataFrame({"timestamp": weeks, "model": "ssd", "gpus": 16, "throughput_img_s": values}).to_csv(path, index=False)
    done = run("detect", str(path), "--metric", "throughput_img_s", "--json", "--online")
    assert done.returncode == 0, done.stderr
    (cp,) = json.loads(done.stdout)["change_points"]
    keys = {"model", "gpus", "timestamp", "before", "after", "change", "pvalue", "detected_at", "confirmed"}
    assert set(cp) == keys | {"confidence"}  # issue 54 added confidence; every earlier key kept
    assert cp["timestamp"].startswith(str(weeks[45].date())) and cp["confirmed"] is True
    delay = weeks.get_loc(pd.Timestamp(cp["detected_at"])) - 45
    assert 1 <= delay <= 3  # confirmed by the second or third run at the new level, not before
    offline = json.loads(run("detect", str(path), "--metric", "throughput_img_s", "--json").stdout)["change_points"]
    assert [c["timestamp"] for c in offline] == [cp["timestamp"]] and "detected_at" not in offline[0]
