"""NVIDIA DALI pipelines: CPU-only on nodes without a GPU, `mixed` decode and GPU ops with one."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from bench.data.dataset import CocoDataset, SegmentationDataset
from bench.loaders.base import MEAN, STD, LoaderOptions, LoaderStats


def _dali():
    from nvidia.dali import fn, pipeline_def, types

    return fn, pipeline_def, types


def _to_torch(tensor_list, device: torch.device) -> torch.Tensor:
    """DALI TensorList -> torch tensor, without a host round trip on GPU."""
    if hasattr(tensor_list, "as_cpu") and device.type == "cuda":
        from nvidia.dali.plugin.pytorch import feed_ndarray

        t = tensor_list.as_tensor()
        out = torch.empty(t.shape(), dtype=_TORCH_DTYPES[str(t.dtype)], device=device)
        feed_ndarray(t, out, cuda_stream=torch.cuda.current_stream())
        return out
    return torch.from_numpy(np.array(tensor_list.as_array()))


_TORCH_DTYPES = {
    "DALIDataType.FLOAT": torch.float32,
    "DALIDataType.INT32": torch.int32,
    "DALIDataType.INT64": torch.int64,
    "DALIDataType.UINT8": torch.uint8,
}


class _DaliLoader:
    def __init__(self, pipe_def, sizes: tuple[int, ...], opts: LoaderOptions):
        self.steps_per_epoch = opts.steps_per_epoch(len(sizes))
        gpu = opts.device.type == "cuda"
        self.pipe = pipe_def(
            batch_size=opts.batch_size,
            num_threads=opts.threads,
            device_id=opts.device.index if gpu else None,  # None: a CPU-only pipeline
            seed=opts.seed,
            prefetch_queue_depth=2,
        )
        self.pipe.build()
        self.device, self.sizes, self.stats = opts.device, sizes, LoaderStats()

    def _account(self, ids: np.ndarray) -> None:
        self.stats.record(ids.reshape(-1).tolist(), self.sizes)

    def close(self) -> None:
        del self.pipe


class DaliCocoLoader(_DaliLoader):
    def __init__(self, ds: CocoDataset, anchors_cxcywh: torch.Tensor, opts: LoaderOptions):
        fn, pipeline_def, types = _dali()
        gpu = opts.device.type == "cuda"
        shard, seed, image_size = opts.shard, opts.seed, opts.image_size
        a = anchors_cxcywh
        anchors_ltrb = torch.cat([a[:, :2] - a[:, 2:] / 2, a[:, :2] + a[:, 2:] / 2], 1).reshape(-1).tolist()

        @pipeline_def
        def pipe():
            jpegs, boxes, labels, image_ids = fn.readers.coco(
                file_root=str(ds.root / "images"),
                annotations_file=str(ds.annotations_file),
                shard_id=shard.rank,
                num_shards=shard.world,
                ratio=True,
                ltrb=True,
                shuffle_after_epoch=True,
                image_ids=True,
                skip_empty=False,
                name="Reader",
                seed=seed,
            )
            begin, size, boxes, labels = fn.random_bbox_crop(
                boxes,
                labels,
                aspect_ratio=[0.5, 2.0],
                thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                scaling=[0.3, 1.0],
                bbox_layout="xyXY",
                allow_no_crop=True,
                num_attempts=50,
            )
            images = fn.decoders.image_slice(
                jpegs, begin, size, device="mixed" if gpu else "cpu", output_type=types.RGB
            )
            flip = fn.random.coin_flip(probability=0.5)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=flip)
            images = fn.resize(images, resize_x=image_size, resize_y=image_size)
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW", mean=list(MEAN), std=list(STD), mirror=flip
            )
            boxes, labels = fn.box_encoder(
                boxes,
                labels,
                criteria=0.5,
                anchors=anchors_ltrb,
                offset=True,
                stds=[0.1, 0.1, 0.2, 0.2],
                scale=1.0,
            )
            if gpu:
                boxes, labels = boxes.gpu(), labels.gpu()
            return images, boxes, labels, image_ids

        super().__init__(pipe, ds.sizes, opts)
        self._id_to_index = {i + 1: i for i in range(len(ds.files))}  # generated ids are index + 1

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        for _ in range(self.steps_per_epoch):
            images, boxes, labels, ids = self.pipe.run()
            self._account(np.array([self._id_to_index.get(int(i), 0) for i in np.array(ids.as_array()).reshape(-1)]))
            yield {
                "images": _to_torch(images, self.device),
                "boxes": _to_torch(boxes, self.device),
                "labels": _to_torch(labels, self.device).long(),
            }


class DaliSegmentationLoader(_DaliLoader):
    def __init__(self, ds: SegmentationDataset, opts: LoaderOptions):
        fn, pipeline_def, types = _dali()
        gpu = opts.device.type == "cuda"
        shard, seed, image_size = opts.shard, opts.seed, opts.image_size
        images = [str(ds.root / p) for p in ds.images]
        masks = [str(ds.root / p) for p in ds.masks]
        common = dict(shard_id=shard.rank, num_shards=shard.world, shuffle_after_epoch=True, seed=seed)

        @pipeline_def
        def pipe():
            # Two readers over parallel lists with the same seed keep image i paired with mask i;
            # the labels output is the file index, which we also use for accounting.
            jpegs, idx = fn.readers.file(files=images, labels=list(range(len(images))), name="Reader", **common)
            pngs, _ = fn.readers.file(files=masks, labels=list(range(len(masks))), **common)
            img = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB)
            mask = fn.decoders.image(pngs, device="cpu", output_type=types.GRAY)
            if gpu:
                mask = mask.gpu()
            scale = fn.random.uniform(range=[1.0, 1.5])
            side = scale * image_size
            img = fn.resize(img, resize_x=side, resize_y=side)
            mask = fn.resize(mask, resize_x=side, resize_y=side, interp_type=types.INTERP_NN)
            # One window and one flip, drawn once, applied to image and mask alike.
            same_crop = dict(
                crop=(image_size, image_size),
                crop_pos_x=fn.random.uniform(range=[0.0, 1.0]),
                crop_pos_y=fn.random.uniform(range=[0.0, 1.0]),
                mirror=fn.random.coin_flip(probability=0.5),
            )
            img = fn.crop_mirror_normalize(
                img, dtype=types.FLOAT, output_layout="CHW", mean=list(MEAN), std=list(STD), **same_crop
            )
            mask = fn.crop_mirror_normalize(mask, dtype=types.UINT8, output_layout="HWC", **same_crop)
            return img, mask, idx

        super().__init__(pipe, ds.sizes, opts)

    def epoch(self) -> Iterator[dict[str, torch.Tensor]]:
        for _ in range(self.steps_per_epoch):
            images, masks, idx = self.pipe.run()
            self._account(np.array(idx.as_array()))
            yield {
                "images": _to_torch(images, self.device),
                "masks": _to_torch(masks, self.device)[..., 0].long(),
            }
