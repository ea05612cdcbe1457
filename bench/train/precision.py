"""How a rank's step runs on its device: autocast dtype, GradScaler, memory layout, optimizer, compile.

The default step is the one NVIDIA's reference scripts (DeepLearningExamples SSD, DeepLabv3+) train
with: channels_last activations and weights for conv models, `cudnn.benchmark` on CUDA, a fused
optimizer on CUDA (foreach on CPU), bf16 autocast where the device has it. The same code runs on a
CPU node and a GPU node; what differs is chosen from the node (`torch.cuda.is_available()`).

Why it matters beyond speed: storage sizing and the compute/communication balance rest on the
per-GPU rate, so a step slower than the tuned model understates each GPU's demand by as much
(docs/benchmarks.md, section 13, has the measured effect of each choice).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from bench.config.models import TrainConfig
from bench.errors import ConfigError

PRECISIONS = ("fp32", "bf16", "fp16")
COMPILE_MODES = ("none", "torch_compile", "cuda_graphs")
# Extra unmeasured steps a compiled model runs before the measured window: the first call compiles,
# and cudagraph trees (cuda_graphs) warm up once, record once, then replay.
COMPILE_WARMUP_STEPS = 3
BF16_MIN_CAPABILITY = (8, 0)


def node_device() -> torch.device:
    """This node's kind of device: what `bench train` will run on (the index comes from the slot)."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def bf16_supported(device: torch.device) -> bool:
    """bf16 autocast is fast on CPUs (oneDNN) and on GPUs of compute capability >= 8.0 (Ampere on)."""
    if device.type != "cuda":
        return True
    return torch.cuda.get_device_capability(device) >= BF16_MIN_CAPABILITY


def resolve_precision(cfg: TrainConfig, device: torch.device) -> str:
    """The precision this rank runs: `amp` picks bf16 where the device has it, else fp16.

    fp16 needs a GradScaler's CUDA path to hold (fp16 autocast without one diverged on a GPU within
    5-11 steps); on a CPU node it is refused here, before anything is built.
    """
    precision = cfg.precision
    if cfg.amp and precision == "fp32":
        precision = "bf16" if bf16_supported(device) else "fp16"
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError(
            "precision: fp16 needs a CUDA GPU and this node has none; use one of fp32, bf16 "
            "(allowed: fp32, bf16, fp16; --amp picks bf16 on a CPU node)"
        )
    if precision == "bf16" and not bf16_supported(device):
        major, minor = torch.cuda.get_device_capability(device)
        raise ConfigError(
            f"precision: bf16 needs compute capability >= 8.0, this GPU has {major}.{minor}; "
            "use fp16 or fp32 (allowed: fp32, bf16, fp16)"
        )
    return precision


def check_compile(mode: str, device: torch.device, static_shapes: bool = True) -> None:
    """Refuse a compile setting the node or the loader cannot run, with the reason."""
    if mode != "cuda_graphs":
        return
    if device.type != "cuda":
        raise ConfigError(
            "compile: cuda_graphs replays CUDA graphs and this node has no CUDA GPU; "
            "use none or torch_compile (allowed: none, torch_compile, cuda_graphs)"
        )
    if not static_shapes:
        raise ConfigError(
            "compile: cuda_graphs needs every batch to have the same shapes (a graph replays fixed "
            "buffers; each new shape records a new graph inside the measured window) and this loader "
            "changes them; use none or torch_compile"
        )


# oneDNN's AMX bf16 kernels gave non-finite weight gradients, at random, for SSD's 3x3 stride-2 convs on
# 1-2 pixel maps (torch 2.13, Xeon with amx_bf16): the loss went NaN at step 2-9 in most runs, with or
# without Horovod. Capping oneDNN at AVX512-BF16 removed it (0 of 6 runs vs 6 of 6). Read by oneDNN
# when it creates its first kernel, so it is set before the model is built; a value already in the
# environment is kept.
ONEDNN_ISA_CAP = ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")


def check_node(cfg: TrainConfig) -> str:
    """What a rank refuses before it starts (settings this node's device cannot run); returns the
    precision it will run, after capping oneDNN's ISA for bf16 on a CPU (ONEDNN_ISA_CAP)."""
    device = node_device()
    precision = resolve_precision(cfg, device)
    check_compile(cfg.compile, device)
    if device.type == "cpu" and precision == "bf16":
        os.environ.setdefault(*ONEDNN_ISA_CAP)
    return precision


def autocast_dtype(precision: str) -> torch.dtype | None:
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


@dataclass
class StepSetup:
    """A rank's resolved step settings and the objects they need."""

    precision: str
    device: torch.device
    channels_last: bool
    compile: str
    scaler: torch.amp.GradScaler | None
    # Horovod refuses non-contiguous tensors (channels_last weights have channels_last gradients), so
    # under Horovod only the activations are channels_last and each conv converts its weight itself.
    weights_channels_last: bool = True
    skipped_steps: int = 0

    @property
    def warmup_extra(self) -> int:
        return COMPILE_WARMUP_STEPS if self.compile != "none" else 0

    def autocast(self) -> torch.autocast:
        dtype = autocast_dtype(self.precision)
        return torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None)

    def layout(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The batch with its images in the model's memory layout (a no-op when they already are)."""
        images = batch.get("images")
        if images is None:  # an emulated rank's batch: byte counts
            return dict(batch)
        if self.channels_last and not images.is_contiguous(memory_format=torch.channels_last):
            return {**batch, "images": images.contiguous(memory_format=torch.channels_last)}
        return dict(batch)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """optimizer.step(), through the GradScaler under fp16: a step whose gradients hold inf/NaN is
        skipped and the scale lowered; the number skipped is counted (each one is a step not trained)."""
        if self.scaler is None:
            optimizer.step()
            return
        before = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.get_scale() < before:
            self.skipped_steps += 1


def setup(cfg: TrainConfig, device: torch.device, conv: bool, dense_gradients: bool = False) -> StepSetup:
    """Resolve the step for this device; sets cudnn.benchmark on CUDA (fixed shapes: it picks the
    fastest conv algorithm once per shape, during warm-up). `dense_gradients`: the gradient allreduce
    needs contiguous tensors (Horovod), so the weights stay in the default layout."""
    precision = resolve_precision(cfg, device)
    check_compile(cfg.compile, device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    return StepSetup(precision, device, conv, cfg.compile, scaler, weights_channels_last=conv and not dense_gradients)


def prepare_model(model: torch.nn.Module, step: StepSetup) -> torch.nn.Module:
    """The model in its device layout (channels_last weights for conv models)."""
    model = model.to(step.device)
    if step.channels_last and step.weights_channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def compiled(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    """The module the step calls: eager, torch.compile's default mode, or its reduce-overhead mode,
    which replays forward and backward as CUDA graphs (cudagraph trees). Parameters stay shared with
    `model`, so the optimizer and the gradient allreduce see the same tensors."""
    if mode == "none":
        return model
    return torch.compile(model, mode="reduce-overhead" if mode == "cuda_graphs" else None)


def make_optimizer(params, lr: float, device: torch.device) -> torch.optim.Optimizer:
    """SGD with momentum as the workloads' reference scripts, in one fused kernel per step on CUDA and
    multi-tensor (foreach) on CPU, instead of one small kernel per parameter."""
    if device.type == "cuda":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, fused=True)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=True)
