"""Image work on the GPU, a batch at a time: nvImageCodec decodes JPEGs into device memory
(nvJPEG: the GPU's hardware JPEG decoder where it has one, else nvJPEG's CUDA decoder), CV-CUDA
resizes them with antialiasing (`hq_resize`), nvImageCodec encodes JPEGs (nvJPEG's encoder). The
steps (steps/images.py) call the `*_many` functions here on the GPU backend; a step without one
here (center_crop, convert, phash) uses the CPU's per-image function. Results are host bytes, as on
the CPU, so shards and quarantine rows look the same; a problem with one image is a BadImage in
its place, never an exception.

What the device does not do the same way as Pillow goes to Pillow (backends/cpu_images.py), one
image at a time, counted in the backend's fallbacks (`gpu_support.count_fallback`) so a test that
expects the device path sees it: PNG and WebP (nvImageCodec has no GPU decoder for them), CMYK and
12-bit JPEGs, a JPEG whose bytes do not end with its end-of-image marker (truncated: Pillow decides,
so the quarantine reason is the CPU backend's), anything nvJPEG could not decode, PNG and WebP
encoding. The EXIF orientation (the source reads it, the same number on both backends) and the
conversion to `L` or `RGBA` are done here with array operations written as Pillow does them, not
by nvImageCodec, whose conventions could differ.

Imported only on the GPU backend (like gpu.py); the calls are bound against the installed
releases without a GPU (tests/backends/test_gpu_images_api.py) and run on a GPU in
tests/backends/test_gpu_images.py. Pixel values may differ from Pillow's within the bounds the
parity test checks (PSNR >= 35 dB, mean absolute difference <= 2).
"""

from __future__ import annotations

import threading

from . import cpu_images
from .cpu_images import BadImage, check_raw, resize_geometry

# Every nvImageCodec and CV-CUDA call made here, with the positional-argument count and the
# keywords passed (as gpu.RAPIDS_CALLS): tests/backends/test_gpu_images_api.py binds each against
# the installed release's signature (nvImageCodec's docstrings; CV-CUDA's .pyi stub, as CV-CUDA
# does not import without a GPU), and checks the enum members named.
IMAGE_CALLS: list[tuple[str, int, tuple[str, ...]]] = [
    ("nvidia.nvimgcodec.Backend", 1, ("load_hint", "load_hint_policy")),
    ("nvidia.nvimgcodec.Decoder", 0, ("backends",)),
    ("nvidia.nvimgcodec.Encoder", 0, ("backends",)),
    ("nvidia.nvimgcodec.CodeStream", 1, ()),
    ("nvidia.nvimgcodec.DecodeParams", 0, ("apply_exif_orientation", "color_spec", "allow_any_depth")),
    ("nvidia.nvimgcodec.Decoder.decode", 1, ("params",)),
    ("nvidia.nvimgcodec.Image.cuda", 0, ()),
    ("nvidia.nvimgcodec.as_image", 1, ()),
    ("nvidia.nvimgcodec.JpegEncodeParams", 0, ("progressive", "optimized_huffman")),
    ("nvidia.nvimgcodec.EncodeParams", 0, ("quality_type", "quality_value", "chroma_subsampling",
                                           "jpeg_encode_params")),
    ("nvidia.nvimgcodec.Encoder.encode", 2, ("params",)),
    ("cvcuda.TensorBatch", 1, ()),
    ("cvcuda.TensorBatch.pushback", 1, ()),
    ("cvcuda.Tensor.cuda", 0, ()),
    ("cvcuda.as_tensor", 2, ()),
    ("cvcuda.hq_resize", 2, ("antialias", "interpolation", "roi")),
]
IMAGE_ENUMS = ["nvidia.nvimgcodec.ColorSpec.SRGB", "nvidia.nvimgcodec.QualityType.QUALITY",
               "nvidia.nvimgcodec.ChromaSubsampling.CSS_420", "nvidia.nvimgcodec.ChromaSubsampling.CSS_444",
               "nvidia.nvimgcodec.ChromaSubsampling.CSS_GRAY", "nvidia.nvimgcodec.BackendKind.HW_GPU_ONLY",
               "nvidia.nvimgcodec.BackendKind.HYBRID_CPU_GPU", "nvidia.nvimgcodec.BackendKind.GPU_ONLY",
               "nvidia.nvimgcodec.LoadHintPolicy.FIXED",
               "cvcuda.Interp.NEAREST", "cvcuda.Interp.LINEAR", "cvcuda.Interp.CUBIC", "cvcuda.Interp.LANCZOS"]

# Pillow's filter -> CV-CUDA's hq_resize interpolation. hq_resize takes NEAREST, LINEAR, CUBIC,
# LANCZOS and GAUSSIAN (CV-CUDA's OpHQResize.h). CUBIC is Catmull-Rom (a = -0.5) and LANCZOS is
# Lanczos-3, as Pillow's; with antialias, LINEAR is a triangle filter widened by the scale, as
# Pillow's bilinear. Box and Hamming have no hq_resize kernel: the triangle filter is the nearest.
INTERP = {"nearest": "NEAREST", "box": "LINEAR", "bilinear": "LINEAR", "hamming": "LINEAR", "bicubic": "CUBIC",
          "lanczos": "LANCZOS"}

# Why an image went to Pillow instead of the device: the fallback counters' keys.
HOST_FORMAT = "images: PNG/WebP decoded on the host (nvImageCodec has no GPU decoder for them)"
HOST_UNFINISHED = "images: JPEG without its end-of-image marker (truncated?) decoded on the host"
HOST_UNPARSED = "images: JPEG header nvImageCodec cannot read, decoded on the host"
HOST_CHANNELS = "images: CMYK/YCCK or 12-bit JPEG decoded on the host"
HOST_UNDECODED = "images: JPEG nvJPEG could not decode, decoded on the host"
HOST_BATCH = "images: nvImageCodec failed a whole decode batch, decoded on the host"
HOST_RESIZE = "images: CV-CUDA hq_resize failed, resized on the host"
HOST_ENCODE = "images: PNG/WebP encoded on the host"
HOST_UNENCODED = "images: JPEG nvJPEG could not encode, encoded on the host"

BATCH_IMAGES = 256                    # images on the device at once (one nvImageCodec batch)
BATCH_BYTES = 1 << 29                 # and at most this many decoded pixel bytes
_JPEG_START, _JPEG_END = b"\xff\xd8\xff", b"\xff\xd9"
_LOCAL = threading.local()            # a decoder and an encoder per thread: they are not shared


def _codecs():
    """(nvimgcodec, decoder, encoder) of this thread. The decoder takes the hardware JPEG decoder
    first, then nvJPEG's CUDA decoder, each for every image it can decode (load hint 1: an image
    goes to the same decoder whatever batch it is in, so the pixels do not depend on batching);
    no CPU decoder, so an image the GPU cannot decode comes back as None and goes to Pillow,
    counted. The encoder is nvJPEG's CUDA encoder alone, for the same reason."""
    found = getattr(_LOCAL, "codecs", None)
    if found is None:
        from nvidia import nvimgcodec as nv

        def backend(kind):
            return nv.Backend(kind, load_hint=1.0, load_hint_policy=nv.LoadHintPolicy.FIXED)

        decoder = nv.Decoder(backends=[backend(nv.BackendKind.HW_GPU_ONLY), backend(nv.BackendKind.HYBRID_CPU_GPU),
                                       backend(nv.BackendKind.GPU_ONLY)])
        encoder = nv.Encoder(backends=[backend(nv.BackendKind.HYBRID_CPU_GPU)])
        found = _LOCAL.codecs = (nv, decoder, encoder)
    return found


def _count(why: str, n: int = 1) -> None:
    from .gpu_support import count_fallback

    count_fallback(why, n)


def device_route(data, nv) -> tuple[object | None, str | None]:
    """(nvImageCodec CodeStream, None) for an image nvJPEG decodes on the device, or (None, why
    Pillow decodes it). Reads the header on the host only (tested without a GPU)."""
    head = bytes(data[:3])
    if head != _JPEG_START:
        return None, HOST_FORMAT
    if bytes(data[-16:]).rstrip(b"\x00")[-2:] != _JPEG_END:
        return None, HOST_UNFINISHED
    try:                              # the header is parsed when a property is first read
        stream = nv.CodeStream(memoryview(data))
        codec, channels, precision = stream.codec_name, stream.num_channels, stream.precision
    except Exception:                 # noqa: BLE001 - nvImageCodec raises RuntimeError; any failure means: Pillow
        return None, HOST_UNPARSED
    if codec != "jpeg":
        return None, HOST_UNPARSED
    if channels not in (1, 3) or precision != 8:
        return None, HOST_CHANNELS
    return stream, None


def orient(a, orientation: int, xp):
    """The EXIF orientation applied to an H x W x C array, as Pillow's transposes in
    cpu_images.ORIENT do it (2..8; 1 or anything else: as stored). A contiguous array."""
    if orientation == 2:              # FLIP_LEFT_RIGHT
        a = a[:, ::-1]
    elif orientation == 3:            # ROTATE_180
        a = a[::-1, ::-1]
    elif orientation == 4:            # FLIP_TOP_BOTTOM
        a = a[::-1]
    elif orientation == 5:            # TRANSPOSE
        a = a.transpose(1, 0, 2)
    elif orientation == 6:            # ROTATE_270 (90 degrees clockwise)
        a = a[::-1].transpose(1, 0, 2)
    elif orientation == 7:            # TRANSVERSE
        a = a[::-1, ::-1].transpose(1, 0, 2)
    elif orientation == 8:            # ROTATE_90 (counter-clockwise)
        a = a[:, ::-1].transpose(1, 0, 2)
    return xp.ascontiguousarray(a)


def to_mode(rgb, mode: str, xp):
    """H x W x 3 RGB to `mode` as Pillow's convert does it: L = (19595 R + 38470 G + 7471 B +
    0x8000) >> 16 (Pillow's Convert.c); RGBA with an opaque alpha."""
    if mode == "RGB":
        return rgb
    if mode == "RGBA":
        alpha = xp.full(rgb.shape[:2] + (1,), 255, dtype=xp.uint8)
        return xp.concatenate([rgb, alpha], axis=2)
    wide = rgb.astype(xp.uint32)
    grey = (wide[..., 0] * 19595 + wide[..., 1] * 38470 + wide[..., 2] * 7471 + 0x8000) >> 16
    return grey.astype(xp.uint8)[..., None]


def _host_decode(item, resize_to, why: str):
    _count(why)
    data, mode, orientation, draft = item
    try:
        return cpu_images.decode(data, mode, orientation, draft, resize_to)
    except BadImage as err:
        return err


def _to_host(arrays: list) -> list:
    """Device pixel arrays -> (pixels, w, h, c) with host pixels: one copy for all of them
    (through the backend's host-transfer ledger), each image a memoryview into it."""
    import cupy as cp

    from .gpu import to_host_copy

    if not arrays:
        return []
    host = memoryview(to_host_copy(cp.concatenate([a.ravel() for a in arrays]), "images: pixels to host"))
    out, start = [], 0
    for a in arrays:
        h, w, c = a.shape
        out.append((host[start:start + a.size], w, h, c))
        start += a.size
    return out


def _to_device(items: list) -> list:
    """Host (pixels, w, h, c) -> H x W x C device arrays: one copy for all of them."""
    import cupy as cp
    import numpy as np

    if not items:
        return []
    flat = cp.asarray(np.concatenate([np.frombuffer(px, np.uint8) for px, *_ in items]))
    out, start = [], 0
    for _, w, h, c in items:
        out.append(flat[start:start + w * h * c].reshape(h, w, c))
        start += w * h * c
    cp.cuda.Device().synchronize()                 # the copy is done before another library's stream reads it
    return out


def _batches(sizes: list[int]):
    """Index ranges of at most BATCH_IMAGES images and (but for a single larger one) BATCH_BYTES."""
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= BATCH_IMAGES or total + size > BATCH_BYTES):
            yield start, i
            start, total = i, 0
        total += size
    if start < len(sizes):
        yield start, len(sizes)


def decode_many(items, resize_to=None):
    """items: (bytes, mode, orientation, draft size or None). JPEGs are decoded on the device in
    batches (draft is a Pillow form of scaling: the device decodes at full size and resizes);
    resize_to: (how, W, H, filter) of the resize right after decode (steps/images.Decode), done on
    the device before the pixels leave it."""
    import cupy as cp

    nv, decoder, _ = _codecs()
    out: list = [None] * len(items)
    device: list[tuple[int, object]] = []
    for i, item in enumerate(items):
        if not item[0]:                            # no bytes: the CPU kernel's reason, nothing to decode
            out[i] = _cpu(cpu_images.decode, item)
            continue
        stream, why = device_route(item[0], nv)
        if why:
            out[i] = _host_decode(item, resize_to, why)
        else:
            device.append((i, stream))
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB, allow_any_depth=False)
    sizes = [s.width * s.height * 3 for _, s in device]
    for start, stop in _batches(sizes):
        chunk = device[start:stop]
        try:
            images, missing = decoder.decode([s for _, s in chunk], params=params), HOST_UNDECODED
        except RuntimeError:                       # not one image's fault that could be told apart
            images, missing = [None] * len(chunk), HOST_BATCH
        arrays, where = [], []
        for (i, _), img in zip(chunk, images):
            if img is None:
                out[i] = _host_decode(items[i], resize_to, missing)
                continue
            _, mode, orientation, _ = items[i]
            rgb = cp.asarray(img.cuda())           # H x W x 3 (rows may be padded: asarray keeps the strides)
            arrays.append(to_mode(orient(rgb, orientation, cp), mode, cp))
            where.append(i)
        if resize_to is not None:
            arrays = _resize_on_device(arrays, *resize_to)
        cp.cuda.Device().synchronize()             # nvImageCodec and CV-CUDA work on their own streams
        for i, result in zip(where, _to_host(arrays)):
            out[i] = result
    return out


def _resize_on_device(arrays: list, how: str, tw: int, th: int, filter: str) -> list:
    """fit | fill | stretch as cpu_images.resize: the same size and source region
    (cpu_images.resize_geometry; hq_resize takes the region as a fractional ROI (lowH, lowW,
    highH, highW) in pixel edges, as Pillow's box), resampled by CV-CUDA's antialiased hq_resize,
    one call per channel count. Arrays already at the size are returned as they are."""
    import cupy as cp
    import cvcuda

    interp = getattr(cvcuda.Interp, INTERP[filter])
    out = list(arrays)
    todo: dict[int, list[tuple[int, tuple[int, int], tuple[float, ...]]]] = {}
    for i, a in enumerate(arrays):
        h, w, c = a.shape
        (ow, oh), box = resize_geometry(w, h, how, tw, th)
        if (ow, oh) == (w, h):
            continue
        roi = (0.0, 0.0, float(h), float(w)) if box is None else (box[1], box[0], box[3], box[2])
        todo.setdefault(c, []).append((i, (oh, ow), roi))
    for group in todo.values():
        batch = cvcuda.TensorBatch(len(group))
        for i, _, _ in group:
            batch.pushback(cvcuda.as_tensor(arrays[i], "HWC"))
        try:
            resized = cvcuda.hq_resize(batch, [size for _, size, _ in group], antialias=True, interpolation=interp,
                                       roi=[roi for _, _, roi in group])
        except (RuntimeError, ValueError):         # CV-CUDA's errors: each image to Pillow, counted
            _count(HOST_RESIZE, len(group))
            for i, _, _ in group:
                out[i] = _pillow_resize(arrays[i], how, tw, th, filter)
            continue
        for (i, _, _), tensor in zip(group, resized):
            out[i] = cp.asarray(tensor.cuda())
    return out


def _pillow_resize(array, how: str, tw: int, th: int, filter: str):
    """One device image resized by cpu_images.resize, back on the device."""
    import cupy as cp
    import numpy as np

    from .gpu import to_host_copy

    h, w, c = array.shape
    pixels, ow, oh, c = cpu_images.resize(to_host_copy(array, "images: pixels to host").tobytes(), w, h, c,
                                          how, tw, th, filter)
    return cp.asarray(np.frombuffer(pixels, np.uint8).reshape(oh, ow, c))


def resize_many(items, how: str, tw: int, th: int, filter: str):
    """Host pixels (pixels, w, h, c) resized on the device (`_resize_on_device`); pixels already at
    the size are handed on unchanged, as on the CPU."""
    import cupy as cp

    out: list = [None] * len(items)
    todo = []
    for i, (pixels, w, h, c) in enumerate(items):
        try:
            check_raw(pixels, w, h, c)
        except BadImage as err:
            out[i] = err
            continue
        if resize_geometry(w, h, how, tw, th)[0] == (w, h):
            out[i] = (pixels, w, h, c)
        else:
            todo.append(i)
    for start, stop in _batches([len(items[i][0]) for i in todo]):
        chunk = todo[start:stop]
        arrays = _resize_on_device(_to_device([items[i] for i in chunk]), how, tw, th, filter)
        cp.cuda.Device().synchronize()
        for i, result in zip(chunk, _to_host(arrays)):
            out[i] = result
    return out


def encode_many(items, fmt: str, quality: int):
    """JPEG through nvImageCodec (nvJPEG's encoder; 4:2:0 below quality 95, 4:4:4 from 95, grey
    for one channel, as the CPU encodes; baseline, standard Huffman tables). raw: the bytes as
    they are; PNG and WebP: Pillow, counted."""
    import cupy as cp

    if fmt != "jpeg":
        if fmt != "raw":
            _count(HOST_ENCODE, len(items))
        return [_cpu(cpu_images.encode, item, fmt, quality) for item in items]
    nv, _, encoder = _codecs()
    out: list = [None] * len(items)
    todo: dict[int, list[int]] = {}                 # channels -> rows
    for i, (pixels, w, h, c) in enumerate(items):
        try:
            check_raw(pixels, w, h, c)
        except BadImage as err:
            out[i] = err
            continue
        if c == 4:
            out[i] = BadImage("JPEG has no alpha channel: add `convert: RGB` before encode")
            continue
        todo.setdefault(c, []).append(i)
    css = (nv.ChromaSubsampling.CSS_420 if quality < 95 else nv.ChromaSubsampling.CSS_444)
    for c, rows in todo.items():
        params = nv.EncodeParams(quality_type=nv.QualityType.QUALITY, quality_value=float(quality),
                                 chroma_subsampling=nv.ChromaSubsampling.CSS_GRAY if c == 1 else css,
                                 jpeg_encode_params=nv.JpegEncodeParams(progressive=False, optimized_huffman=False))
        for start, stop in _batches([len(items[i][0]) for i in rows]):
            chunk = rows[start:stop]
            arrays = _to_device([items[i] for i in chunk])
            try:
                streams = encoder.encode([nv.as_image(a) for a in arrays], "jpeg", params=params)
            except RuntimeError:                   # the whole batch: each image to Pillow, counted
                streams = [None] * len(chunk)
            for i, stream in zip(chunk, streams):
                if stream is None:
                    _count(HOST_UNENCODED)
                    out[i] = _cpu(cpu_images.encode, items[i], fmt, quality)
                else:
                    out[i] = bytes(stream)
            del arrays
    cp.cuda.Device().synchronize()
    return out


def _cpu(func, item, *args):
    try:
        return func(*item, *args)
    except BadImage as err:
        return err
