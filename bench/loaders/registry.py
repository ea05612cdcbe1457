"""The one place that picks a loader backend for (workload, loader kind)."""

from __future__ import annotations

import torch

from bench.config.models import TrainConfig
from bench.data.dataset import check_jpegs, load_coco, load_segmentation
from bench.data.location import is_s3
from bench.loaders.base import Loader, LoaderOptions, Shard
from bench.loaders.synthetic import SyntheticLoader


def build_loader(cfg: TrainConfig, model: torch.nn.Module, shard: Shard, device: torch.device) -> Loader:
    if cfg.synthetic:
        return SyntheticLoader(cfg, model, device)
    assert cfg.data is not None
    opts = LoaderOptions(shard, cfg.batch_size, cfg.image_size, cfg.loader_threads, cfg.seed, device)
    if is_s3(cfg.data):  # s3://BUCKET/PREFIX: an emulated rank's records, or an image model's files
        if cfg.accelerator_s is None:
            from bench.loaders.s3_images import s3_image_loader

            return s3_image_loader(cfg, model, opts)
        from bench.loaders.s3_records import s3_records_loader

        return s3_records_loader(cfg.data, opts, cfg.record_format, cfg.decode, cfg.shuffle, cfg.prefetch)
    if cfg.accelerator_s is not None:  # an emulated rank: the records reader (bench.workloads.emulate)
        from bench.data.records import load_records
        from bench.loaders.records import file_records_loader

        manifest = load_records(cfg.data, cfg.record_format)
        return file_records_loader(cfg.data, manifest, opts, cfg.decode, cfg.shuffle, cfg.prefetch)
    if cfg.workload == "ssd":
        ds = load_coco(cfg.data)
        check_jpegs(ds.root / "images", ds.files, shard.rank, shard.world)
        if cfg.loader == "dali":
            from bench.loaders.dali_loader import DaliCocoLoader

            return DaliCocoLoader(ds, model.anchors, opts)
        from bench.loaders.torch_loader import coco_loader

        return coco_loader(ds, model.anchors, opts)
    ds = load_segmentation(cfg.data)
    check_jpegs(ds.root, ds.images, shard.rank, shard.world)
    if cfg.loader == "dali":
        from bench.loaders.dali_loader import DaliSegmentationLoader

        return DaliSegmentationLoader(ds, opts)
    from bench.loaders.torch_loader import segmentation_loader

    return segmentation_loader(ds, opts)
