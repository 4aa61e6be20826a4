"""The GPU image path's array work that does not need a GPU, checked against Pillow with numpy
(gpu_images writes it for any array module): EXIF orientation, the conversion to L and RGBA, and
the batching. The device code is checked in test_gpu_images.py (marker gpu) and its library calls
in test_gpu_images_api.py (marker gpu_api)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from gpuetl.backends import cpu_images, gpu_images


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_is_pillows_transpose(orientation):
    rgb = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3), dtype=np.uint8)   # not square
    img = Image.fromarray(rgb)
    want = np.asarray(img.transpose(cpu_images.ORIENT[orientation]) if orientation in cpu_images.ORIENT else img)
    got = gpu_images.orient(rgb, orientation, np)
    assert got.flags.c_contiguous
    assert np.array_equal(got, want)


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_mode_conversion_is_pillows_convert(mode):
    rgb = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    rgb[0, :4] = [[0, 0, 0], [255, 255, 255], [255, 0, 0], [1, 2, 3]]
    want = np.asarray(Image.fromarray(rgb).convert(mode))
    got = gpu_images.to_mode(rgb, mode, np)
    assert np.array_equal(got.reshape(want.shape), want)
    assert got.ndim == 3 and got.shape[2] == cpu_images.CHANNELS[mode]


def test_grey_replicated_to_rgb_converts_back_to_the_same_grey():
    grey = np.arange(256, dtype=np.uint8).reshape(16, 16)
    assert np.array_equal(gpu_images.to_mode(np.repeat(grey[..., None], 3, axis=2), "L", np)[..., 0], grey)


def test_batches_bound_images_and_bytes_and_cover_every_image():
    sizes = [10] * 600
    ranges = list(gpu_images._batches(sizes))
    assert ranges[0] == (0, gpu_images.BATCH_IMAGES) and ranges[-1][1] == 600
    assert all(a == b for (_, a), (b, _) in zip(ranges, ranges[1:]))
    big = gpu_images.BATCH_BYTES
    assert list(gpu_images._batches([big, 1, big // 2, big // 2 + 1])) == [(0, 1), (1, 3), (3, 4)]
    assert list(gpu_images._batches([])) == []


def test_every_filter_has_an_hq_resize_interpolation():
    from gpuetl.steps.images import ResizeParams

    filters = ResizeParams.model_fields["filter"].annotation.__args__
    assert set(filters) == set(gpu_images.INTERP)
    assert set(gpu_images.INTERP.values()) <= {"NEAREST", "LINEAR", "CUBIC", "LANCZOS", "GAUSSIAN"}


def test_the_fill_region_stays_inside_the_image_for_every_size():
    """tw / (tw / w) can be w plus an ulp: the region is clamped, or Pillow refuses the box (the
    CPU kernel) and the ROI would reach outside the image (the GPU's)."""
    for w in range(1, 700, 7):
        for h in range(1, 700, 11):
            for t in (32, 96, 224):
                (ow, oh), (left, top, right, bottom) = cpu_images.resize_geometry(w, h, "fill", t, t)
                assert (ow, oh) == (t, t) and 0 <= left <= right <= w and 0 <= top <= bottom <= h, (w, h, t)
    rotated = bytes(375 * 500 * 3)                          # a 500x375 photo after EXIF orientation 6
    assert cpu_images.resize(rotated, 375, 500, 3, "fill", 96, 96, "bicubic")[1:] == (96, 96, 3)


def _random_pixels(seed: int, w: int, h: int, c: int) -> bytes:
    a = np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)
    if c == 4:
        a[0, :5, 3] = [0, 1, 128, 254, 255]               # the alpha's edge values
    return a.tobytes()


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_convert_is_the_cpu_kernels(channels, mode):
    """RGBA -> RGB over white (Pillow's paste, rounded as its DIV255), RGB/RGBA -> L (Pillow's luma,
    alpha ignored), L -> RGB (repeated): byte for byte."""
    pixels = _random_pixels(channels, 13, 7, channels)
    want = cpu_images.convert(pixels, 13, 7, channels, mode)
    got = gpu_images.convert_array(np.frombuffer(pixels, np.uint8).reshape(7, 13, channels), mode, np)
    assert (got.shape[1], got.shape[0], got.shape[2]) == want[1:]
    assert got.tobytes() == bytes(want[0])


@pytest.mark.parametrize("w, h, tw, th", [(13, 7, 5, 3), (13, 7, 4, 4), (8, 8, 20, 3), (5, 9, 5, 9), (6, 6, 1, 1)])
def test_center_crop_is_the_cpu_kernels(w, h, tw, th):
    pixels = _random_pixels(w * h, w, h, 3)
    want = cpu_images.center_crop(pixels, w, h, 3, tw, th)
    got = gpu_images.center_crop_array(np.frombuffer(pixels, np.uint8).reshape(h, w, 3), tw, th, np)
    assert got.flags.c_contiguous and (got.shape[1], got.shape[0]) == want[1:3] and got.tobytes() == bytes(want[0])


def test_phash_bits_are_the_cpu_kernels():
    """The DCT, median and bit order of cpu_images.phash, for a batch of 32 x 32 grey images (a 32 x 32
    grey image is the CPU's own input to the DCT: its resize to 32 x 32 returns it as it is)."""
    rng = np.random.default_rng(7)
    stack = rng.integers(0, 256, (40, 32, 32), dtype=np.uint8)
    stack[1] = 0                                           # flat: every bit 0
    stack[2] = np.arange(32, dtype=np.uint8)[None, :] * 8  # a ramp
    got = gpu_images.phash_values(stack, np)
    want = [cpu_images.phash(a.tobytes(), 32, 32, 1) for a in stack]
    assert got.dtype == np.int64 and got.tolist() == want
    assert any(v < 0 for v in want)                        # the top bit set: int64 wraps as the CPU's
