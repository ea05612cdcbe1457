"""The image models' read path over S3 (issue 64 item 3): ssd's COCO tree or deeplabv3plus's images and
masks staged into a bucket (bench.suite.staging_s3), each file read whole by one counted GET
(bench.loaders.s3_get.CountedGets) and decoded and augmented by the torch loader exactly as from a folder.

Why the torch loader and not DALI's reader here: the installed DALI reads s3:// (../shared/FEASIBILITY.md),
but through its own C++ client, which reports no count of the bytes it received; the suite's S3 truth
rule is the bytes each rank received, cross-checked against the server's count, so a DALI rank over S3
would carry a figure nobody measured. `loader: dali` over S3 is refused naming the setting
(bench.config.models.SweepConfig, and here for a hand-run `bench train`).

No up-front JPEG check on the rank over S3 (it would add header GETs the byte count does not hold): the
worker checked the index and every JPEG header before the upload (bench.suite.staging_s3.check_images)
and verified the objects after it, and a file that will not decode fails its step naming the object.
"""

from __future__ import annotations

import io

import torch

from bench.config.models import TrainConfig
from bench.data.dataset import coco_of, segmentation_of
from bench.data.dataset_s3 import S3Tree, s3_tree
from bench.data.location import S3Location, node_s3_client, parse_location
from bench.errors import ConfigError
from bench.loaders.base import LoaderOptions
from bench.loaders.s3_get import CountedGets
from bench.loaders.torch_loader import TorchLoader, coco_loader, segmentation_loader


class _Object(io.BytesIO):
    """An object's bytes; its repr is its URL, so PIL's "cannot identify image file ..." names the object."""

    def __init__(self, data: bytes, url: str) -> None:
        super().__init__(data)
        self.url = url

    def __repr__(self) -> str:
        return repr(self.url)


class S3Opener:
    """`rel` -> the object's bytes, read whole by one counted GET and held to its staged size."""

    def __init__(self, gets: CountedGets, tree: S3Tree) -> None:
        # the sizes alone cross into the loader workers, not the tree's client
        self.gets, self.sizes = gets, {rel: int(entry["size"]) for rel, entry in tree.staged.items()}

    def __call__(self, rel: str) -> io.BytesIO:
        data = self.gets.get(rel, length=self.sizes.get(rel), what="image")
        return _Object(data, f"{self.gets.location.url}/{rel}")


def s3_image_loader(cfg: TrainConfig, model: torch.nn.Module, opts: LoaderOptions) -> TorchLoader:
    """cfg.workload's dataset under cfg.data (s3://BUCKET/PREFIX), read with the node's own credentials.
    The loader carries `received` (bytes its GETs brought back, all workers), `get_errors` (failed tries)
    and `dataset_bytes` (the dataset's staged bytes), as the records reader over S3 does."""
    if cfg.loader == "dali":
        raise ConfigError(
            f"--loader dali: --data {cfg.data} is an S3 location; DALI's S3 reader counts no bytes received, so "
            "over S3 the image models read through the torch loader: --loader torch"
        )
    location = parse_location(str(cfg.data))
    assert isinstance(location, S3Location)
    tree = s3_tree(node_s3_client(), location)
    opener = S3Opener(CountedGets(location), tree)
    if cfg.workload == "ssd":
        loader = coco_loader(coco_of(tree), model.anchors, opts, opener)
    else:
        loader = segmentation_loader(segmentation_of(tree), opts, opener)
    gets = opener.gets
    loader.received = gets.received
    loader.get_errors = gets.errors
    loader.dataset_bytes = sum(loader.sizes)
    return loader
