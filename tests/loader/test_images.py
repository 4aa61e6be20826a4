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


def test_jpegs_are_decoded_into_the_batch_without_pillow(jpeg_dataset, monkeypatch):
    """The loader's JPEGs take TurboJPEG's path into the batch's array; Pillow's decode (what the
    image steps fall back on) is not called for them."""
    from gpuetl.backends import cpu_images

    def refuse(*args, **kw):
        raise AssertionError("decoded through cpu_images.decode")

    monkeypatch.setattr(cpu_images, "decode", refuse)
    batches = list(gpuetl.Loader(jpeg_dataset, split=None, columns=["image"], batch_size=4, decode_images="chw",
                                 drop_last=False, num_workers=0, prefetch=0))
    assert batches and all(b["image"].shape == (4, 3, 16, 24) for b in batches)


@pytest.mark.parametrize("mode, jpeg, expect", [
    ("RGB", dict(), True), ("RGB", dict(progressive=True), True), ("RGB", dict(subsampling=0), True),
    ("L", dict(grey=True), True), ("RGB", dict(grey=True), False), ("L", dict(), False)],
    ids=["rgb", "progressive", "444", "grey", "grey-as-rgb", "rgb-as-grey"])
def test_the_turbojpeg_path_gives_the_pixels_decode_gives_or_declines(mode, jpeg, expect):
    """Where decode_jpeg_into decodes, its pixels are cpu_images.decode's (Pillow's) exactly; where
    a conversion between colour and grey would be needed it declines, and decode decides."""
    from gpuetl.backends import cpu_images
    from imagedata import image_bytes, jpeg_bytes

    grey = jpeg.pop("grey", False)
    data = jpeg_bytes(40, 30, seed=5, **jpeg)
    if grey:
        data = image_bytes(Image.open(io.BytesIO(data)).convert("L"), "JPEG")
    c = 3 if mode == "RGB" else 1
    out = np.zeros((30, 40, c), np.uint8)
    assert cpu_images.decode_jpeg_into(data, mode, out) is expect
    if expect:
        pixels, w, h, channels = cpu_images.decode(data, mode, 1)
        np.testing.assert_array_equal(out, np.frombuffer(pixels, np.uint8).reshape(h, w, channels))
    assert cpu_images.decode_jpeg_into(data[: len(data) // 2], mode, out) is False        # cut short: Pillow decides
    assert cpu_images.decode_jpeg_into(data, mode, np.zeros((31, 40, c), np.uint8)) is False   # not its row's size
