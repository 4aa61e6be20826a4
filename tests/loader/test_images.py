"""decode_images: an image dataset's column as one uint8 array per batch, the pixels the CPU
image steps decode (Pillow on the stored JPEG; the stored bytes of a raw dataset)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import gpuetl
from gpuetl.errors import SpecError

from imagedata import photo_folder, run_images


def make(base: Path, fmt: str) -> Path:
    photo_folder(base / "photos", n=10, w=48, h=40)
    steps = [{"decode": {}}, {"resize": {"size": [24, 16], "mode": "fill"}}, {"encode": {"format": fmt}}]
    run_images(base, steps=steps)
    return base / "out"


@pytest.fixture(scope="module")
def jpeg_dataset(tmp_path_factory):
    return make(tmp_path_factory.mktemp("loader-jpeg"), "jpeg")


@pytest.fixture(scope="module")
def raw_dataset(tmp_path_factory):
    return make(tmp_path_factory.mktemp("loader-raw"), "raw")


def stored(root: Path) -> dict[str, bytes]:
    t = pq.read_table(root / "part-00000.parquet", columns=["key", "image"])
    return dict(zip(t.column("key").to_pylist(), t.column("image").to_pylist()))


@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_decoded_jpegs_are_the_pixels_pillow_gives(jpeg_dataset, layout):
    by_key = stored(jpeg_dataset)
    batches = list(gpuetl.Loader(jpeg_dataset, split=None, columns=["key", "image", "label_id"], batch_size=4,
                                 decode_images=layout, drop_last=False, seed=1))
    seen = 0
    for batch in batches:
        images = batch["image"]
        assert images.dtype == np.uint8 and images.shape == ((4, 16, 24, 3) if layout == "hwc" else (4, 3, 16, 24))
        for key, pixels in zip(batch["key"].to_pylist(), images):
            want = np.asarray(Image.open(io.BytesIO(by_key[key])).convert("RGB"))
            assert np.array_equal(pixels if layout == "hwc" else pixels.transpose(1, 2, 0), want)
            seen += 1
    assert seen == 12                     # 10 photos, the last batch filled from the order's start


def test_raw_images_are_their_stored_bytes(raw_dataset):
    by_key = stored(raw_dataset)
    batch = next(iter(gpuetl.Loader(raw_dataset, split=None, columns=["key", "image"], batch_size=5,
                                    decode_images="hwc", num_workers=0)))
    for key, pixels in zip(batch["key"].to_pylist(), batch["image"]):
        assert pixels.tobytes() == by_key[key]


def test_a_dataset_without_splits_is_read_with_split_none(jpeg_dataset):
    with pytest.raises(SpecError, match="no splits: pass split=None"):
        gpuetl.Loader(jpeg_dataset)


def test_decoding_images_of_a_dataset_without_them_is_refused(jpeg_dataset):
    with pytest.raises(SpecError, match="keep it in columns"):
        gpuetl.Loader(jpeg_dataset, split=None, columns=["key"], decode_images="chw")
    with pytest.raises(SpecError, match="output='numpy' or 'torch'"):
        gpuetl.Loader(jpeg_dataset, split=None, decode_images="chw", output="arrow")
