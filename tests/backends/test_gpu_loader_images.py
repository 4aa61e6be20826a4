"""decode_images on the Loader's CUDA path (backends/gpu_loader.py) without a GPU: the batch's
JPEGs go through gpu_images.decode_on_device (nvImageCodec's real header parser routes them; the
decoder is stood in for by Pillow, returning H x W x 3 sRGB images as nvImageCodec does; CuPy is
numpy), are checked and stacked as the device stacks them, and must equal the CPU path's pixels,
batch for batch (marker gpu_api: `make gpu-api`)."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.gpu_api

try:
    from nvidia import nvimgcodec
except Exception as err:            # noqa: BLE001 (not installed, or a broken install)
    pytest.skip(f"nvImageCodec does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

import gpuetl  # noqa: E402
from gpuetl.backends import gpu_images, gpu_loader  # noqa: E402
from gpuetl.backends.gpu_tallies import fallback_counts, reset_tallies  # noqa: E402
from gpuetl.loader import loader as loader_mod  # noqa: E402
from imagedata import photo_folder, run_images  # noqa: E402
from loaderdata import ArrowTables  # noqa: E402


class _Decoded:
    def __init__(self, array):
        self.array = array

    def cuda(self):
        return self.array


class StandInDecoder:
    """nvImageCodec's Decoder.decode: a list of CodeStreams in, one H x W x 3 sRGB image each."""

    def __init__(self):
        self.batches = []

    def decode(self, streams, *, params):
        assert isinstance(streams, list) and params.color_spec == nvimgcodec.ColorSpec.SRGB
        self.batches.append(len(streams))
        return [_Decoded(np.asarray(Image.open(io.BytesIO(bytes(s))).convert("RGB"))) for s in streams]


@pytest.fixture(scope="module")
def jpeg_dataset(tmp_path_factory):
    base = tmp_path_factory.mktemp("loader-gpu-jpeg")
    photo_folder(base / "photos", n=10, w=48, h=40)
    run_images(base, steps=[{"decode": {}}, {"resize": {"size": [24, 16], "mode": "fill"}}, {"encode": {"format": "jpeg"}}])
    return base / "out"


@pytest.fixture
def emulated(monkeypatch):
    made = []

    def device_batches(spec):
        made.append(gpu_loader.DeviceBatches(spec, ArrowTables(), np))
        return made[-1]

    cupy = SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    cupy.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    decoder = StandInDecoder()
    nv = SimpleNamespace(**{name: getattr(nvimgcodec, name) for name in dir(nvimgcodec) if not name.startswith("_")})
    monkeypatch.setattr(gpu_images._LOCAL, "codecs", (nv, decoder, None), raising=False)
    monkeypatch.setattr(loader_mod, "check_device", lambda: None)
    monkeypatch.setattr(loader_mod, "device_batches", device_batches)
    reset_tallies()
    return SimpleNamespace(decoder=decoder, made=made)


@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_images_decoded_on_the_cuda_path_are_the_cpu_paths_pixels(jpeg_dataset, emulated, layout):
    kw = dict(split=None, columns=["label_id", "image"], batch_size=4, decode_images=layout, drop_last=False, seed=2)
    want = list(gpuetl.Loader(jpeg_dataset, **kw))
    # inline (no reader or prefetch thread): the stand-in codecs are this thread's (gpu_images._LOCAL)
    got = list(gpuetl.Loader(jpeg_dataset, device="cuda", output="cupy", num_workers=0, prefetch=0, **kw))
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        assert g["image"].dtype == np.uint8 and g["image"].shape == w["image"].shape
        assert g["image"].flags.c_contiguous
        np.testing.assert_array_equal(g["image"], w["image"])
        np.testing.assert_array_equal(g["label_id"], w["label_id"])
    assert emulated.decoder.batches == [4, 4, 4]          # one nvImageCodec batch a loader batch
    assert fallback_counts() == {}                         # every JPEG decoded on the device
    device = emulated.made[0]
    assert set(device.host_columns) == {"image", "width", "height", "channels", "format"}
    assert device.device_columns == ["label_id"]          # only what is not decoded goes to the device
