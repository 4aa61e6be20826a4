"""backends/gpu_images.py's own code run without a GPU: the device libraries' work is stood in
for by Pillow and numpy, written from their documentation (nvImageCodec decodes a list of
CodeStreams to H x W x 3 sRGB images or None; CV-CUDA's hq_resize takes a TensorBatch, one
(height, width) per tensor and a ROI (lowH, lowW, highH, highW) in pixel edges; the encoder takes
quality and chroma subsampling from EncodeParams), while nvImageCodec's real header parser and
parameter classes are used (marker gpu_api: `make gpu-api`). With Pillow behind the stand-ins the
results must equal the CPU kernels' byte for byte, so the routing, batching, ROI order, the
orientation and mode conversion, the copies to and from the device and the fallback counting are
checked before the first GPU run; the device's own pixels are tests/backends/test_gpu_images.py's."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

pytestmark = pytest.mark.gpu_api

try:
    from nvidia import nvimgcodec
except Exception as err:            # noqa: BLE001 (not installed, or a broken install)
    pytest.skip(f"nvImageCodec does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends import cpu_images, gpu_images  # noqa: E402
from gpuetl.backends.gpu_support import fallback_counts, reset_tallies  # noqa: E402
from imagedata import image_bytes, jpeg_bytes  # noqa: E402

PIL_FILTER = {"NEAREST": Image.Resampling.NEAREST, "LINEAR": Image.Resampling.BILINEAR,
              "CUBIC": Image.Resampling.BICUBIC, "LANCZOS": Image.Resampling.LANCZOS}
SAMPLING = {"CSS_420": 2, "CSS_444": 0}


class _Decoded:
    def __init__(self, array):
        self.array = array

    def cuda(self):
        return self.array


class StandInDecoder:
    def __init__(self, refuse=()):
        self.refuse, self.batches = set(refuse), []

    def decode(self, streams, *, params):
        assert isinstance(streams, list) and params.color_spec == nvimgcodec.ColorSpec.SRGB
        assert params.apply_exif_orientation is False
        self.batches.append(len(streams))
        out = []
        for s in streams:
            data = bytes(s)
            out.append(None if data in self.refuse else _Decoded(np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))))
        return out


class StandInEncoder:
    def encode(self, images, codec, *, params):
        assert codec == "jpeg" and params.quality_type == nvimgcodec.QualityType.QUALITY
        out = []
        for image in images:                   # nvImageCodec's own Images (as_image ran on host arrays)
            assert image.sample_format in (nvimgcodec.SampleFormat.I_RGB, nvimgcodec.SampleFormat.I_Y)
            a = np.asarray(image.cpu())
            buf = io.BytesIO()
            img = Image.fromarray(a[..., 0] if a.shape[2] == 1 else a)
            save = {} if img.mode == "L" else {"subsampling": SAMPLING[params.chroma_subsampling.name]}
            img.save(buf, "JPEG", quality=int(params.quality_value), optimize=False, **save)
            out.append(nvimgcodec.CodeStream(buf.getvalue()))        # what encode returns: CodeStreams
        return out


class _Tensor:
    def __init__(self, array):
        self.array = array

    def cuda(self):
        return self.array


def _hq_resize(batch, sizes, *, antialias, interpolation, roi):
    assert antialias is True and len(sizes) == len(roi) == len(batch)
    out = []
    for a, (h, w), (low_h, low_w, high_h, high_w) in zip(batch, sizes, roi):
        img = Image.fromarray(a[..., 0] if a.shape[2] == 1 else a)
        done = np.asarray(img.resize((w, h), PIL_FILTER[interpolation], box=(low_w, low_h, high_w, high_h)))
        out.append(_Tensor(done.reshape(h, w, a.shape[2])))
    return out


class _TensorBatch(list):
    def __init__(self, capacity):
        super().__init__()
        self.capacity = capacity

    def pushback(self, tensor):
        assert len(self) < self.capacity
        self.append(tensor)


def _as_tensor(array, layout):
    assert layout == "HWC" and array.ndim == 3 and array.dtype == np.uint8 and array.flags.c_contiguous
    return array


@pytest.fixture
def emulated(monkeypatch):
    """The stand-ins in place of cupy, cvcuda, gpu.to_host_copy and the codecs; the tallies zeroed."""
    host_bytes = []
    cupy = SimpleNamespace(asarray=np.asarray, ascontiguousarray=np.ascontiguousarray, concatenate=np.concatenate,
                           full=np.full, uint8=np.uint8, uint32=np.uint32,
                           cuda=SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None)))
    cvcuda = SimpleNamespace(TensorBatch=_TensorBatch, as_tensor=_as_tensor, hq_resize=_hq_resize,
                             Interp=SimpleNamespace(**{k: k for k in ("NEAREST", "LINEAR", "CUBIC", "LANCZOS")}))

    def to_host_copy(values, reason):
        host_bytes.append((reason, values.nbytes))
        return np.array(values)

    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cvcuda", cvcuda)
    monkeypatch.setitem(sys.modules, "gpuetl.backends.gpu", SimpleNamespace(to_host_copy=to_host_copy))
    decoder = StandInDecoder()
    nv = SimpleNamespace(**{name: getattr(nvimgcodec, name) for name in dir(nvimgcodec) if not name.startswith("_")})
    monkeypatch.setattr(gpu_images._LOCAL, "codecs", (nv, decoder, StandInEncoder()), raising=False)
    reset_tallies()
    return SimpleNamespace(decoder=decoder, host_bytes=host_bytes)


def _same(got, want):
    assert not isinstance(got, Exception), got
    assert bytes(got[0]) == bytes(want[0]) and tuple(got[1:]) == tuple(want[1:])


def _exif_jpeg(orientation, w=50, h=30):
    exif = Image.Exif()
    exif[cpu_images.EXIF_ORIENTATION] = orientation
    return image_bytes(Image.open(io.BytesIO(jpeg_bytes(w, h, seed=orientation))), "JPEG", exif=exif.tobytes())


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_decode_equals_the_cpu_kernel_for_orientations_modes_and_grey(emulated, mode):
    items = [(_exif_jpeg(o), mode, o, None) for o in range(1, 9)]
    items.append((image_bytes(Image.open(io.BytesIO(jpeg_bytes(40, 30))).convert("L"), "JPEG"), mode, 1, None))
    for got, item in zip(gpu_images.decode_many(items), items):
        _same(got, cpu_images.decode(item[0], item[1], item[2]))
    assert fallback_counts() == {}
    assert [reason for reason, _ in emulated.host_bytes] == ["images: pixels to host"]      # one copy per batch


@pytest.mark.parametrize("how, filter", [("fill", "bicubic"), ("fit", "lanczos"), ("stretch", "bilinear"),
                                         ("fill", "nearest")])
def test_fused_and_separate_resize_equal_the_cpu_kernels(emulated, how, filter):
    datas = [jpeg_bytes(90 + 7 * i, 60 + 5 * i, seed=i) for i in range(5)] + [jpeg_bytes(32, 32, seed=9)]
    items = [(d, "RGB", 1, None) for d in datas]
    target = (how, 32, 32)
    want = [cpu_images.resize(*cpu_images.decode(d, "RGB", 1), *target, filter) for d in datas]
    for got, w in zip(gpu_images.decode_many(items, (*target, filter)), want):
        _same(got, w)
    decoded = gpu_images.decode_many(items)
    for got, w in zip(gpu_images.resize_many(decoded, *target, filter), want):
        _same(got, w)
    grey = [cpu_images.convert(*cpu_images.decode(d, "RGB", 1), "L") for d in datas[:2]]
    for got, g in zip(gpu_images.resize_many(grey, *target, filter), grey):
        _same(got, cpu_images.resize(*g, *target, filter))
    assert fallback_counts() == {}


def test_what_the_device_does_not_decode_goes_to_pillow_counted(emulated):
    good = jpeg_bytes(40, 30)
    refused = jpeg_bytes(40, 30, seed=5)
    emulated.decoder.refuse.add(refused)
    cases = [good, good[: len(good) // 2], image_bytes(Image.open(io.BytesIO(good)).convert("CMYK"), "JPEG"),
             image_bytes(Image.open(io.BytesIO(good)).convert("RGBA"), "PNG"), refused, b"garbage", b""]
    got = gpu_images.decode_many([(d, "RGB", 1, None) for d in cases])
    for g, d in zip(got, cases):
        try:
            want = cpu_images.decode(d, "RGB", 1)
        except cpu_images.BadImage as err:
            assert isinstance(g, cpu_images.BadImage) and str(g) == str(err)
        else:
            _same(g, want)
    assert fallback_counts() == {gpu_images.HOST_UNFINISHED: 1, gpu_images.HOST_CHANNELS: 1,
                                 gpu_images.HOST_FORMAT: 2, gpu_images.HOST_UNDECODED: 1}


def test_batches_split_the_work(emulated, monkeypatch):
    monkeypatch.setattr(gpu_images, "BATCH_IMAGES", 3)
    datas = [jpeg_bytes(20, 16, seed=i) for i in range(7)]
    got = gpu_images.decode_many([(d, "RGB", 1, None) for d in datas], ("fit", 10, 10, "bicubic"))
    assert emulated.decoder.batches == [3, 3, 1]
    for g, d in zip(got, datas):
        _same(g, cpu_images.decode(d, "RGB", 1, None, ("fit", 10, 10, "bicubic")))


@pytest.mark.parametrize("quality", [90, 95])
def test_jpeg_encode_equals_the_cpu_kernel(emulated, quality):
    rgb = cpu_images.decode(jpeg_bytes(48, 40), "RGB", 1)
    grey = cpu_images.convert(*rgb, "L")
    rgba = cpu_images.decode(jpeg_bytes(48, 40), "RGBA", 1)
    got = gpu_images.encode_many([rgb, grey, rgba, (b"short", 4, 4, 3)], "jpeg", quality)
    # The same settings (quality, subsampling) give nearly the same pixels; neither bytes nor pixels
    # are equal, as the CPU encodes through simplejpeg and the stand-in through Pillow (each with its
    # own libjpeg-turbo build; grey: Pillow writes 2x2 sampling factors, nvJPEG 1x1).
    for g, item in ((got[0], rgb), (got[1], grey)):
        a, b = (np.asarray(Image.open(io.BytesIO(x)), dtype=np.float64)
                for x in (g, cpu_images.encode(*item, "jpeg", quality)))
        assert a.shape == b.shape and np.abs(a - b).mean() <= 2.0, np.abs(a - b).mean()   # the parity bound
    assert JpegImagePlugin.get_sampling(Image.open(io.BytesIO(got[0]))) == \
        JpegImagePlugin.get_sampling(Image.open(io.BytesIO(cpu_images.encode(*rgb, "jpeg", quality))))
    for g, item in zip(got[2:], [rgba, (b"short", 4, 4, 3)]):
        with pytest.raises(cpu_images.BadImage) as cpu:
            cpu_images.encode(*item, "jpeg", quality)
        assert isinstance(g, cpu_images.BadImage) and str(g) == str(cpu.value)
    assert fallback_counts() == {}


def test_png_webp_and_raw_encode_as_the_cpu_png_and_webp_counted(emulated):
    rgb = cpu_images.decode(jpeg_bytes(24, 16), "RGB", 1)
    for fmt in ("png", "webp", "raw"):
        assert gpu_images.encode_many([rgb], fmt, 80) == [cpu_images.encode(*rgb, fmt, 80)]
    assert fallback_counts() == {gpu_images.HOST_ENCODE: 2}


def test_a_library_failing_a_whole_batch_sends_it_to_pillow_counted(emulated, monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("the device library failed")

    datas = [jpeg_bytes(40, 30, seed=i) for i in range(3)]
    target = ("fill", 16, 16, "bicubic")
    want = [cpu_images.decode(d, "RGB", 1, None, target) for d in datas]
    monkeypatch.setattr(emulated.decoder, "decode", fails)
    for got, w in zip(gpu_images.decode_many([(d, "RGB", 1, None) for d in datas], target), want):
        _same(got, w)
    assert fallback_counts() == {gpu_images.HOST_BATCH: 3}

    reset_tallies()
    monkeypatch.setattr(sys.modules["cvcuda"], "hq_resize", fails)
    decoded = [cpu_images.decode(d, "RGB", 1) for d in datas]
    for got, w in zip(gpu_images.resize_many(decoded, *target), want):
        _same(got, w)
    assert fallback_counts() == {gpu_images.HOST_RESIZE: 3}

    reset_tallies()
    nv, decoder, encoder = gpu_images._LOCAL.codecs
    monkeypatch.setattr(encoder, "encode", fails)
    assert gpu_images.encode_many(decoded, "jpeg", 90) == [cpu_images.encode(*d, "jpeg", 90) for d in decoded]
    assert fallback_counts() == {gpu_images.HOST_UNENCODED: 3}
