"""Precision and compile settings: refused where the node cannot run them, the fp16 GradScaler's skipped
steps counted, and the CPU run's summary naming its precision with no GPU figure made up."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch

from bench.cli import build_parser
from bench.cli.train import train_config
from bench.config.models import TrainConfig
from bench.config.types import parse
from bench.errors import ConfigError
from bench.train.loop import _same_shapes
from bench.train.precision import StepSetup, check_compile, resolve_precision, setup
from tests.conftest import BENCH

CPU = torch.device("cpu")


def cfg(**over) -> TrainConfig:
    return TrainConfig(workload="ssd", synthetic=True, steps=2, **over)


def test_unknown_precision_or_compile_is_refused_naming_the_field_and_values():
    with pytest.raises(ConfigError, match=r"precision: Input should be 'fp32', 'bf16' or 'fp16'"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 2, "precision": "fp64"})
    with pytest.raises(ConfigError, match=r"compile: Input should be 'none', 'torch_compile' or 'cuda_graphs'"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 2, "compile": "jit"})
    with pytest.raises(ConfigError, match="amp/precision"):
        parse(TrainConfig, {"workload": "ssd", "synthetic": True, "steps": 2, "amp": True, "precision": "fp32"})


def test_settings_survive_the_ranks_spec_file(tmp_path):
    """What a launcher hands a rank (train.json, bench.launch.train_spec) is what the rank runs: `amp`
    given alone stays the alias it was, not `amp` beside an explicit fp32 (which the model refuses)."""
    for over in ({"precision": "bf16", "compile": "torch_compile"}, {"amp": True}, {}):
        original = cfg(**over)
        path = tmp_path / "train.json"
        path.write_text(original.model_dump_json(exclude_unset=True))
        assert train_config(build_parser().parse_args(["train", "--spec", str(path)])) == original


def test_amp_picks_bf16_on_a_cpu_and_fp16_is_refused_there():
    assert resolve_precision(cfg(amp=True), CPU) == "bf16"
    assert resolve_precision(cfg(precision="bf16"), CPU) == "bf16"
    assert resolve_precision(cfg(), CPU) == "fp32"
    with pytest.raises(ConfigError, match=r"precision: fp16 needs a CUDA GPU.*allowed: fp32, bf16, fp16"):
        resolve_precision(cfg(precision="fp16"), CPU)


def test_cuda_graphs_refused_on_a_cpu_and_with_changing_shapes():
    with pytest.raises(ConfigError, match=r"compile: cuda_graphs .* no CUDA GPU"):
        check_compile("cuda_graphs", CPU)
    with pytest.raises(ConfigError, match="compile: cuda_graphs needs every batch to have the same shapes"):
        check_compile("cuda_graphs", torch.device("cuda"), static_shapes=False)
    check_compile("torch_compile", CPU)
    first = _same_shapes(None, {"images": torch.zeros(2, 3, 8, 8)}, 0)
    assert _same_shapes(first, {"images": torch.zeros(2, 3, 8, 8)}, 1) == first
    with pytest.raises(ConfigError, match="at step 2 the loader gave"):
        _same_shapes(first, {"images": torch.zeros(2, 3, 16, 16)}, 2)


def test_grad_scaler_skips_a_step_with_an_inf_gradient_and_counts_it():
    """GradScaler's CPU path (torch >= 2.3) runs the same unscale/skip/update logic as on CUDA."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = StepSetup("fp16", CPU, False, "none", torch.amp.GradScaler("cpu", init_scale=1024.0))
    x = torch.randn(8, 4)

    def train_once(poison: bool) -> torch.Tensor:
        optimizer.zero_grad()
        step.backward(model(x).square().mean())
        if poison:
            model.weight.grad[0, 0] = math.inf
        before = model.weight.detach().clone()
        step.step(optimizer)
        return before

    before = train_once(poison=True)
    assert torch.equal(model.weight, before)  # the poisoned step did not touch the weights
    assert step.skipped_steps == 1 and step.scaler.get_scale() == 512.0
    before = train_once(poison=False)
    assert not torch.equal(model.weight, before)
    assert step.skipped_steps == 1


def test_default_step_is_channels_last_on_conv_models():
    step = setup(cfg(precision="bf16"), CPU, conv=True)
    assert step.scaler is None and step.autocast().fast_dtype == torch.bfloat16
    batch = step.layout({"images": torch.zeros(2, 3, 8, 8)})
    assert batch["images"].is_contiguous(memory_format=torch.channels_last)
    assert setup(cfg(), CPU, conv=True, dense_gradients=True).weights_channels_last is False


def _bench_train(tmp_path, *extra):
    out = tmp_path / "m"
    args = [BENCH, "train", "--workload", "ssd", "--synthetic", "--steps", "4", "--metrics-out", str(out), *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=300), out


def test_fp16_on_a_cpu_node_is_refused_before_the_run(tmp_path):
    done, out = _bench_train(tmp_path, "--precision", "fp16")
    assert done.returncode == 2, done.stderr
    assert "precision: fp16 needs a CUDA GPU" in done.stderr and "allowed: fp32, bf16, fp16" in done.stderr
    failed = json.loads((out / "failed-rank0.json").read_text())
    assert failed["error"].startswith("ConfigError: precision") and not (out / "summary.json").exists()
    assert not (out / "samples-rank0.jsonl").exists()  # nothing was started


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_cpu_run_names_its_precision_and_no_gpu_busy_figure(tmp_path, precision):
    done, out = _bench_train(tmp_path, "--precision", precision)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == precision and summary["compile"] == "none"
    assert summary["scaler_skipped_steps"] is None  # no scaler outside fp16
    assert summary["utilisation"]["gpu_busy_share"] is None  # no GPU: null, never a made-up figure
    assert summary["per_rank"][0]["gpu_busy_share"] is None and summary["per_rank"][0]["gpu_busy_s"] is None
    assert summary["utilisation"]["gpu_busy_note"] == "no GPU"
    assert math.isfinite(summary["loss_last"])


@pytest.mark.slow
def test_amp_alias_runs_bf16_on_a_cpu(tmp_path):
    done, out = _bench_train(tmp_path, "--amp")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["precision"] == "bf16"
