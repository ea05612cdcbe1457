"""An image dataset staged into a bucket (bench.suite.staging_s3), read by the same parsers as a folder
(bench.data.dataset.coco_of, segmentation_of, given an S3Tree): the layout's index is one GET, and every file it lists
must be an object of the verified staging manifest (MANIFEST.s3.json), whose sizes the rank's reader
then holds each GET to.

Why the staging manifest and not a listing: it is what the worker verified (sizes, ETags, sha256) after
the upload, one GET per rank instead of a paged listing of every object per rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.data.location import S3Location
from bench.errors import DatasetError


@dataclass(frozen=True)
class S3Tree:
    """A staged prefix as a dataset.Tree: `staged` is its manifest's {relative name: {size, ...}}."""

    client: object = field(repr=False)
    root: S3Location
    staged: dict[str, dict] = field(repr=False)

    def where(self, rel: str) -> str:
        return f"{self.root.url}/{rel}".rstrip("/")

    def read_text(self, rel: str) -> str | None:
        from botocore.exceptions import ClientError

        if rel not in self.staged:
            return None
        try:
            body = self.client.get_object(Bucket=self.root.bucket, Key=self.root.key(rel))["Body"].read()
        except ClientError as error:
            raise DatasetError(f"{self.where(rel)}: staged but not readable ({error})") from None
        try:
            return body.decode()
        except UnicodeDecodeError as error:
            raise DatasetError(f"{self.where(rel)}: not valid JSON ({error})") from None

    def size(self, rel: str) -> int | None:
        entry = self.staged.get(rel)
        return int(entry["size"]) if entry is not None else None

    def count(self, folder: str, suffix: str) -> int:
        prefix = f"{folder}/"
        below = [rel[len(prefix) :] for rel in self.staged if rel.startswith(prefix)]
        return sum(1 for name in below if "/" not in name and name.endswith(suffix))


def s3_tree(client, location: S3Location) -> S3Tree:
    """The staged prefix at `location` (a DatasetError where it holds no verified staging)."""
    from bench.data.stage_s3 import load_s3_manifest

    return S3Tree(client, location, load_s3_manifest(client, location)["files"])
