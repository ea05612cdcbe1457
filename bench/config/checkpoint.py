"""The checkpoint phase's settings (issue 40): what each rank writes and reads back after a scale's
training, as the suite's `checkpoint` setting gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ByteSize,
    Field,
    WithJsonSchema,
    model_validator,
)

from bench.config.types import Frozen, parse
from bench.errors import ConfigError

# --- The checkpoint phase (issue 40): what each rank writes and reads back after a scale's training ---

MIN_BYTES_PER_RANK = 1 << 20
MAX_BYTES_PER_RANK = 1 << 40


class CheckpointSpec(Frozen):
    """One scale's checkpoint phase. `size`: shards of `bytes_per_rank` per rank and checkpoint, laid
    out as DLIO lays them out; `model`: torch.save of the model's and optimizer's state. MLPerf Storage
    writes 10 checkpoints, then reads 10: the defaults."""

    mode: Literal["size", "model"]
    bytes_per_rank: Annotated[ByteSize, Field(ge=MIN_BYTES_PER_RANK, le=MAX_BYTES_PER_RANK)] | None = None
    writes: int = Field(10, ge=1, le=100)
    reads: int = Field(10, ge=1, le=100)

    @model_validator(mode="after")
    def _size_matches_mode(self) -> CheckpointSpec:
        if self.mode == "size" and self.bytes_per_rank is None:
            raise ValueError("bytes_per_rank: required when checkpoint is a size (1 MiB to 1 TiB per rank)")
        if self.mode == "model" and self.bytes_per_rank is not None:
            raise ValueError("bytes_per_rank: a model checkpoint is as large as its state; give one or the other")
        return self


def parse_setting(value: Any) -> CheckpointSpec | None:
    """The suite's `checkpoint` setting: `off` (None), `model`, or {bytes_per_rank, writes, reads}
    (a dict with `mode: model` takes writes and reads for a model checkpoint)."""
    if value is None or value is False or value == "off":
        return None
    if value == "model":
        return CheckpointSpec(mode="model")
    if isinstance(value, Mapping):
        data = dict(value)
        data.setdefault("mode", "size")
        return parse(CheckpointSpec, data, prefix="checkpoint.")
    if isinstance(value, CheckpointSpec):
        return value
    raise ConfigError(f"checkpoint: {value!r} is not one of off, model, {{bytes_per_rank, writes, reads}}")


def _checkpoint_setting(value: Any):
    """The `checkpoint` setting as suite files, the form and `bench sweep --config` give it, checked at
    the edge and kept in its JSON form: "off", "model", or {bytes_per_rank, writes, reads} (`mode`
    added); a bad one names the field and what is allowed."""
    try:
        spec = parse_setting(value)
    except ConfigError as error:
        # "checkpoint.writes: ..." (a field) or "checkpoint.(config): ..." (the whole spec) as "writes: ..."
        message = str(error).removeprefix("checkpoint: ").replace("checkpoint.(config): ", "")
        raise ValueError(message.replace("checkpoint.", "")) from None
    if spec is None:
        return "off"
    return "model" if spec == CheckpointSpec(mode="model") else spec.model_dump(mode="json")


CheckpointSetting = Annotated[
    Any,
    BeforeValidator(_checkpoint_setting),
    WithJsonSchema({"type": ["string", "object"], "description": "off, model, or {bytes_per_rank, writes, reads}"}),
]
