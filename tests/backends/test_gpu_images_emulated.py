"""backends/gpu_images.py's own code run without a GPU: the device libraries' work is stood in
for by Pillow and numpy, written from their documentation (nvImageCodec decodes a list of
CodeStreams to H x W x 3 sRGB images or None; CV-CUDA's hq_resize_into fills a TensorBatch of
outputs, taking a ROI (lowH, lowW, highH, highW) in pixel edges per image; the encoder takes
quality and chroma subsampling from EncodeParams; CuPy is numpy, a stream's queued copies land
when it is synchronized), while nvImageCodec's real header parser and parameter classes are used
(marker gpu_api: `make gpu-api`). With Pillow behind the stand-ins the results must equal the CPU
kernels' byte for byte, so the routing, batching, ROI order, the orientation and mode conversion,
the crop and phash, the copies to and from the device and the fallback counting are checked
before the first GPU run: the host-item kernels (`decode_many`...) and the steps' frame path
(`decode_step`, ..., on a CPU backend whose image methods are the GPU's), row for row against the CPU steps
with the host-transfer ledger holding no pixels. The device's own pixels are
tests/backends/test_gpu_images.py's."""

from __future__ import annotations

import io
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from PIL import Image, JpegImagePlugin

pytestmark = pytest.mark.gpu_api

try:
    from nvidia import nvimgcodec
except Exception as err:            # noqa: BLE001 (not installed, or a broken install)
    pytest.skip(f"nvImageCodec does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends import cpu_images, gpu_images  # noqa: E402
from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.backends.gpu_tallies import HOST_BYTES, count_host_bytes, fallback_counts, reset_tallies  # noqa: E402
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


def _hq_resize_into(dst, src, *, antialias, interpolation, roi):
    sizes = [a.shape[:2] for a in dst]
    for out, done in zip(dst, _hq_resize(src, sizes, antialias=antialias, interpolation=interpolation, roi=roi)):
        out[...] = done.array
    return dst


class _Stream:
    """A CuPy stream whose queued copies are done when it is synchronized (as on a device)."""

    def __init__(self):
        self.queued = []

    def synchronize(self):
        for out, a in self.queued:
            np.copyto(out, a)
        self.queued.clear()


def _asnumpy(a, stream=None, out=None, blocking=True):
    if out is None:
        return np.array(a)
    if blocking:
        np.copyto(out, a)
    else:
        stream.queued.append((out, a))
    return out


def _to_host_copy(host_bytes):
    def to_host_copy(values, reason):
        out = pa.Array.from_pandas(values) if isinstance(values, pd.Series) else np.array(values)
        host_bytes.append((reason, out.nbytes))     # a frame's column: Arrow, as the GPU backend gives it
        count_host_bytes(reason, out.nbytes)
        return out
    return to_host_copy


def _strings_from_buffers(buf, bounds, n):
    """gpu_device.strings_from_buffers on the host: a binary column over buf, element i buf[bounds[i]:bounds[i+1]]."""
    assert len(bounds) == n + 1 and bounds[0] == 0 and bounds[-1] == len(buf)
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(np.asarray(bounds, np.int64)),
                                                                 pa.py_buffer(np.ascontiguousarray(buf))])
    return CpuBackend().series(arr.cast(pa.binary()), "binary")


class EmulatedGpu(CpuBackend):
    """The CPU backend (pandas frames) running the image steps through gpu_images' step functions,
    as GpuBackend's typed image methods do: the frame path's code with numpy for CuPy."""

    def decode_images(self, df, mode, *, resize_to=None, draft_for=None):
        return gpu_images.decode_step(self, df, mode, resize_to)

    def resize_images(self, df, how, width, height, filter):
        return gpu_images.resize_step(self, df, how, width, height, filter)

    def center_crop_images(self, df, width, height):
        return gpu_images.center_crop_step(self, df, width, height)

    def convert_images(self, df, mode):
        return gpu_images.convert_step(self, df, mode)

    def encode_images(self, df, fmt, quality):
        return gpu_images.encode_step(self, df, fmt, quality)

    def phash_images(self, df, column):
        return gpu_images.phash_step(self, df, column)

    def image_file_bytes(self, values, keys, decode_next):
        return gpu_images.hold_file_bytes(self, values, keys, decode_next)

    def image_bytes(self, rows):
        return gpu_images.held_image_bytes(self, rows)

    def string_buffers(self, col):              # binary too (the CPU's casts to string, for text)
        arr = pa.Array.from_pandas(col).cast(pa.large_binary())
        _, offsets, data = arr.buffers()
        return (np.frombuffer(offsets, np.int64)[arr.offset:arr.offset + len(arr) + 1],
                np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8),
                arr.is_valid().to_numpy(zero_copy_only=False))


@pytest.fixture
def emulated(monkeypatch):
    """The stand-ins in place of cupy, cvcuda, gpu_device.to_host_copy and the codecs; the tallies zeroed."""
    host_bytes = []
    cupy = SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    cupy.asnumpy = _asnumpy
    cupy.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None), Stream=_Stream,
                                alloc_pinned_memory=lambda n: bytearray(n))
    cvcuda = SimpleNamespace(TensorBatch=_TensorBatch, as_tensor=_as_tensor, hq_resize_into=_hq_resize_into,
                             Interp=SimpleNamespace(**{k: k for k in ("NEAREST", "LINEAR", "CUBIC", "LANCZOS")}))

    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cvcuda", cvcuda)
    monkeypatch.setitem(sys.modules, "gpuetl.backends.gpu_device",
                        SimpleNamespace(to_host_copy=_to_host_copy(host_bytes), strings_from_buffers=_strings_from_buffers))
    decoder = StandInDecoder()
    nv = SimpleNamespace(**{name: getattr(nvimgcodec, name) for name in dir(nvimgcodec) if not name.startswith("_")})
    monkeypatch.setattr(gpu_images._LOCAL, "codecs", (nv, decoder, StandInEncoder()), raising=False)
    monkeypatch.setattr(gpu_images._LOCAL, "held", {}, raising=False)
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
    assert [reason for reason, _ in emulated.host_bytes] == [gpu_images.SENT_PIXELS]      # one copy per batch


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
    monkeypatch.setattr(sys.modules["cvcuda"], "hq_resize_into", fails)
    decoded = [cpu_images.decode(d, "RGB", 1) for d in datas]
    for got, w in zip(gpu_images.resize_many(decoded, *target), want):
        _same(got, w)
    assert fallback_counts() == {gpu_images.HOST_RESIZE: 3}

    reset_tallies()
    nv, decoder, encoder = gpu_images._LOCAL.codecs
    monkeypatch.setattr(encoder, "encode", fails)
    assert gpu_images.encode_many(decoded, "jpeg", 90) == [cpu_images.encode(*d, "jpeg", 90) for d in decoded]
    assert fallback_counts() == {gpu_images.HOST_UNENCODED: 3}


# -- the frame path: the steps with the pixels kept in the (device) column -------------------------

def _frame(datas, orientations=None):
    """A frame as an images source hands it to decode."""
    n = len(datas)
    cpu = CpuBackend()
    return pd.DataFrame({"key": cpu.series([f"k{i}" for i in range(n)], "string"),
                         "image": cpu.series(pa.array(datas, pa.binary()), "binary"),
                         "orientation": cpu.series(orientations or [1] * n, "int8"),
                         "orig_width": cpu.series([0] * n, "int32"), "orig_height": cpu.series([0] * n, "int32")})


def _chain(steps, df, backend):
    """The steps' quarantine, one after another, the rows they quarantine taken out: (frame, reasons by key)."""
    import gpuetl.steps.images  # noqa: F401 - registers the image steps
    from gpuetl.steps.base import STEPS

    built = [STEPS[name].from_raw(raw) for step in steps for name, raw in step.items()]
    reasons = {}
    for i, step in enumerate(built):
        step = step.look_ahead(built[i + 1:])
        df, bad, why = step.quarantine(df, backend)
        if bad is not None:
            mask = bad.to_numpy(dtype=bool)
            reasons.update(zip(df["key"][mask], why[mask]))
            df = df[~mask]
        df = step.transform(df, backend)
    return df, reasons


def _rows(df):
    return [{k: (bytes(v) if isinstance(v, (bytes, memoryview)) else v) for k, v in r.items()}
            for r in pa.Table.from_pandas(df, preserve_index=False).to_pylist()]


GOOD = [jpeg_bytes(90, 60, seed=1), jpeg_bytes(61, 47, seed=2), jpeg_bytes(40, 30, seed=3)]


@pytest.mark.parametrize("steps", [
    [{"decode": {"mode": "RGB", "draft": False}}, {"resize": {"size": 24, "mode": "fill"}}, {"center_crop": 20},
     {"convert": "L"}, {"phash": {}}, {"encode": "raw"}],
    [{"decode": {"mode": "RGBA", "draft": False}}, {"center_crop": [33, 25]}, {"convert": "RGB"},
     {"resize": {"size": [16, 12], "mode": "fit", "filter": "lanczos"}}, {"encode": "raw"}, {"phash": {}}],
    [{"decode": {"mode": "L", "draft": False}}, {"convert": "RGB"}, {"phash": {"column": "h"}}, {"encode": "png"}],
])
def test_frame_steps_equal_the_cpu_steps_and_only_control_and_file_bytes_reach_the_host(emulated, steps):
    exif = [_exif_jpeg(o) for o in (3, 6)]
    datas = [*GOOD, *exif, GOOD[0][: len(GOOD[0]) // 2], b"garbage", image_bytes(Image.new("RGBA", (9, 7)), "PNG")]
    orientations = [1, 1, 1, 3, 6, 1, 1, 1]
    want, want_bad = _chain(steps, _frame(datas, orientations), CpuBackend())
    got, got_bad = _chain(steps, _frame(datas, orientations), EmulatedGpu())
    assert got_bad == want_bad and len(want_bad) == 2            # the truncated JPEG and the garbage
    assert _rows(got) == _rows(want)
    png = steps[-1] == {"encode": "png"}
    assert fallback_counts() == {gpu_images.HOST_UNFINISHED: 1, gpu_images.HOST_FORMAT: 2,
                                 **({gpu_images.HOST_ENCODE: 6} if png else {})}
    # pixels never (but for Pillow's PNG encoder): the rows' offsets and sizes, and the file bytes
    # nvImageCodec reads from host memory
    assert set(HOST_BYTES) == {gpu_images.SENT_CONTROL, gpu_images.SENT_FILE_BYTES,
                               *([gpu_images.SENT_PILLOW] if png else [])}
    assert HOST_BYTES[gpu_images.SENT_FILE_BYTES] == sum(map(len, datas))


def test_frame_steps_refuse_what_the_cpu_steps_refuse(emulated):
    """A step before decode, pixels whose sizes do not add up, an RGBA JPEG, phash of encoded bytes."""
    steps = [{"decode": {"mode": "RGBA", "draft": False}}, {"encode": "jpeg"}]
    want, want_bad = _chain(steps, _frame(GOOD), CpuBackend())
    got, got_bad = _chain(steps, _frame(GOOD), EmulatedGpu())
    assert got_bad == want_bad and len(got_bad) == 3 and all("alpha" in r for r in got_bad.values())
    for steps in ([{"resize": {"size": 8}}], [{"center_crop": 8}], [{"convert": "L"}], [{"encode": "png"}],
                  [{"encode": "jpeg"}], [{"encode": "raw"}]):
        df = _frame([*GOOD, GOOD[0]]).assign(width=CpuBackend().series([90, 1, 40, 2], "int32"),
                                             height=CpuBackend().series([60, 1, 30, 2], "int32"),
                                             channels=CpuBackend().series([3, 3, 3, 4], "int32"),
                                             format=CpuBackend().series(["jpeg", "raw", None, "raw"], "string"))
        want, want_bad = _chain(steps, df, CpuBackend())
        got, got_bad = _chain(steps, df.copy(), EmulatedGpu())
        # raw hands the bytes on unchecked, as the CPU kernel does; JPEG refuses four channels first
        assert got_bad == want_bad and len(got_bad) == (2 if steps == [{"encode": "raw"}] else 4), (steps, got_bad)
        assert _rows(got) == _rows(want)
    df = _frame(GOOD).assign(width=CpuBackend().series([0] * 3, "int32"), height=CpuBackend().series([0] * 3, "int32"),
                             channels=CpuBackend().series([0] * 3, "int32"),
                             format=CpuBackend().series(["jpeg"] * 3, "string"))
    want, _ = _chain([{"phash": {}}], df, CpuBackend())
    got, _ = _chain([{"phash": {}}], df.copy(), EmulatedGpu())
    assert list(got["phash"]) == list(want["phash"])              # decoded to L on the device, then hashed
    assert set(HOST_BYTES) == {gpu_images.SENT_CONTROL, gpu_images.SENT_FILE_BYTES}


def test_frame_jpeg_encode_counts_only_the_encoded_bytes(emulated):
    steps = [{"decode": {"draft": False}}, {"resize": {"size": 24, "mode": "fill"}}, {"encode": {"format": "jpeg"}}]
    got, bad = _chain(steps, _frame(GOOD), EmulatedGpu())
    assert not bad and list(got["format"]) == ["jpeg"] * 3
    sent = dict(HOST_BYTES)
    assert sent[gpu_images.SENT_ENCODED] == sum(len(bytes(b)) for b in got["image"])
    assert set(sent) == {gpu_images.SENT_CONTROL, gpu_images.SENT_FILE_BYTES, gpu_images.SENT_ENCODED}
    assert fallback_counts() == {}


def test_batches_bound_the_staged_file_bytes(emulated, monkeypatch):
    monkeypatch.setattr(gpu_images, "BATCH_IMAGES", 2)
    got, bad = _chain([{"decode": {"draft": False}}], _frame(GOOD), EmulatedGpu())
    assert not bad and emulated.decoder.batches == [2, 1]
    assert HOST_BYTES[gpu_images.SENT_FILE_BYTES] == sum(map(len, GOOD))


def test_a_step_that_changes_no_pixels_hands_the_frame_on_without_a_copy(emulated):
    """A resize after the decode that did it, a convert to the mode the pixels have."""
    decoded, bad = _chain([{"decode": {"draft": False}}, {"resize": {"size": 24, "mode": "fill"}}], _frame(GOOD),
                          EmulatedGpu())
    assert not bad and list(decoded["width"]) == [24] * 3
    for step in ({"resize": {"size": 24, "mode": "fill"}}, {"convert": "RGB"}):
        got, bad = _chain([step], decoded, EmulatedGpu())
        assert got is decoded and not bad
    got, _ = _chain([{"convert": "L"}], decoded, EmulatedGpu())
    assert got is not decoded and list(got["channels"]) == [1] * 3


# -- the images source's file bytes kept on the host when decode is next ----------------------------

def _source_frame(datas, backend, decode_next, orientations=None):
    """A frame as the images source makes it (sources/images.py: Backend.image_file_bytes for the
    image column, each record's file index and offset), with the keys the source gives."""
    from gpuetl.columns import FILE_INDEX, OFFSET

    n = len(datas)
    keys = [(i // 3, 512 * (i % 3)) for i in range(n)]          # tar members: several records a file
    cpu = CpuBackend()
    return pd.DataFrame({"key": cpu.series([f"k{i}" for i in range(n)], "string"),
                         "image": backend.image_file_bytes(list(datas), keys, decode_next),
                         "orientation": cpu.series(orientations or [1] * n, "int8"),
                         "orig_width": cpu.series([0] * n, "int32"), "orig_height": cpu.series([0] * n, "int32"),
                         FILE_INDEX: cpu.series([f for f, _ in keys], "int32"),
                         OFFSET: cpu.series([o for _, o in keys], "int64")})


@pytest.mark.parametrize("steps", [
    [{"decode": {"mode": "RGB", "draft": False}}, {"resize": {"size": 24, "mode": "fill"}}, {"phash": {}},
     {"encode": "png"}],
    [{"decode": {"mode": "L", "draft": False}}, {"center_crop": 20}, {"encode": "raw"}],
])
def test_file_bytes_stay_on_the_host_until_decode(emulated, monkeypatch, steps):
    """Decode next: the column is null until decode, which reads the file bytes where the source
    left them: the rows are the CPU's row for row, no file byte crosses from the device, the
    quarantined rows' raw records are their file bytes, and nothing stays held afterwards."""
    import gpuetl.steps.images  # noqa: F401 - registers the image steps
    from gpuetl.steps.base import STEPS

    monkeypatch.setattr(gpu_images, "BATCH_IMAGES", 3)               # batches of held bytes
    exif = [_exif_jpeg(o) for o in (3, 6)]
    truncated, garbage = GOOD[0][: len(GOOD[0]) // 2], b"garbage"
    datas = [*GOOD, *exif, truncated, garbage, image_bytes(Image.new("RGBA", (9, 7)), "PNG")]
    orientations = [1, 1, 1, 3, 6, 1, 1, 1]
    gpu = EmulatedGpu()
    held = _source_frame(datas, gpu, True, orientations)
    assert held["image"].isna().all()                                # nothing went to the (device) column
    want, want_bad = _chain(steps, _source_frame(datas, CpuBackend(), True, orientations), CpuBackend())
    decode = STEPS["decode"].from_raw(steps[0]["decode"])
    checked, bad, why = decode.quarantine(held, gpu)
    mask = bad.to_numpy(dtype=bool)
    raw = decode.raw_record(held[mask], gpu)                         # what runtime/partition.py keeps
    assert [bytes(v) for v in raw] == [truncated, garbage]
    assert dict(zip(checked["key"][mask], why[mask])) == {k: r for k, r in want_bad.items()}
    assert [bytes(v) for v in checked["image"][mask]] == [truncated, garbage]   # kept what reached the step
    got, got_bad = _chain(steps[1:], decode.transform(checked[~mask], gpu), gpu)
    assert not got_bad and _rows(got) == _rows(want)
    assert gpu_images._LOCAL.held == {}
    assert gpu_images.SENT_FILE_BYTES not in HOST_BYTES
    assert emulated.decoder.batches and max(emulated.decoder.batches) <= 3


def test_file_bytes_go_to_the_device_unless_decode_is_next(emulated):
    """Another step first (phash of the file bytes), or two records with one key: the column
    holds the bytes as before, and decode copies them from it, counted."""
    gpu = EmulatedGpu()
    frame = _source_frame(GOOD, gpu, False)
    assert [bytes(v) for v in frame["image"]] == GOOD and gpu_images._LOCAL.held == {}
    column = gpu.image_file_bytes(list(GOOD), [(0, 0)] * len(GOOD), True)
    assert [bytes(v) for v in column] == GOOD and gpu_images._LOCAL.held == {}
    got, bad = _chain([{"decode": {"draft": False}}], frame, gpu)
    want, _ = _chain([{"decode": {"draft": False}}], _source_frame(GOOD, CpuBackend(), False), CpuBackend())
    assert not bad and _rows(got) == _rows(want)
    assert HOST_BYTES[gpu_images.SENT_FILE_BYTES] == sum(map(len, GOOD))


def test_a_run_from_an_images_source_keeps_file_bytes_on_the_host(emulated, tmp_path):
    """The whole path: the images source, the runtime's steps and quarantine, the sink. Shards
    and quarantine as the CPU's; no file byte copied back from the device."""
    import gpuetl
    from imagedata import photo_folder, quarantine_of, rows_of, write

    photo_folder(tmp_path / "photos", n=5)
    write(tmp_path / "photos" / "cat" / "broken.jpg", GOOD[0][: len(GOOD[0]) // 2])
    write(tmp_path / "photos" / "dog" / "garbage.jpg", b"\xff\xd8\xff" + b"x" * 40 + b"\xff\xd9")
    spec = {"version": 1, "name": "imgs", "source": {"type": "images", "path": "photos/**/*"},
            "steps": [{"decode": {"draft": False}}, {"resize": {"size": [16, 16], "mode": "fill"}},
                      {"encode": {"format": "png"}}],
            "sink": {"path": "cpu", "mode": "overwrite"}}
    cpu = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="sync")
    reset_tallies()
    gpu = gpuetl.Pipeline.from_dict({**spec, "sink": {"path": "gpu", "mode": "overwrite"}},
                                    base_dir=tmp_path).run(backend=EmulatedGpu(), scheduler="sync")
    assert gpu.counts == cpu.counts and cpu.counts["quarantined"] >= 1
    assert rows_of(tmp_path / "gpu") == rows_of(tmp_path / "cpu")
    assert quarantine_of(tmp_path / "gpu") == quarantine_of(tmp_path / "cpu")
    assert gpu_images.SENT_FILE_BYTES not in HOST_BYTES and gpu_images._LOCAL.held == {}
