"""Image work on the GPU, a batch at a time, with the pixels kept on the device from decode to
encode: nvImageCodec decodes JPEGs into device memory (nvJPEG: the GPU's hardware JPEG decoder
where it has one, else nvJPEG's CUDA decoder), CV-CUDA resizes them with antialiasing
(`hq_resize_into`), CuPy crops, converts and hashes them, nvImageCodec encodes JPEGs (nvJPEG's
encoder). A problem with one image is a BadImage in its place, never an exception.

Between steps the pixels are the frame's `image` column as the GPU backend holds it: a cuDF
binary column in device memory (HWC uint8, described by `width`, `height`, `channels`, `format`
"raw"), so a step reads each image as a CuPy view of that column's bytes and writes its results
as one new device column (`decode_step`, `resize_step`, ...: `GpuBackend.decode_images`, `resize_images`, ...). What crosses to
the host, each through the host-transfer ledger with its reason: file bytes in a device column
that nvImageCodec decodes (it reads host memory only: `CodeStream` takes bytes or a numpy array),
staged in pinned memory one batch at a time (when decode comes right after the images source,
the source keeps the file bytes on the host for it instead: hold_file_bytes); the encoded JPEG bytes (nvImageCodec's encoder writes host
`CodeStream`s); the rows' offsets and sizes; and the pixels of the few images Pillow handles.

What the device does not do the same way as Pillow goes to Pillow (backends/cpu_images.py), one
image at a time, counted in the backend's fallbacks (`gpu_tallies.count_fallback`) so a test that
expects the device path sees it: PNG and WebP (nvImageCodec has no GPU decoder for them), CMYK and
12-bit JPEGs, a JPEG whose bytes do not end with its end-of-image marker (truncated: Pillow decides,
so the quarantine reason is the CPU backend's), anything nvJPEG could not decode, PNG and WebP
encoding. The EXIF orientation (the source reads it, the same number on both backends), the
conversions between L, RGB and RGBA, the centre crop and the pHash's DCT are array operations
written as Pillow and cpu_images do them, for any array module (numpy in the tests, CuPy here).

`decode_many`, `resize_many` and `encode_many` are the same device work on host items (the CPU
kernels' form), for the kernel parity tests. The calls are bound against the installed releases
without a GPU (tests/backends/test_gpu_images_api.py) and run on a GPU in
tests/backends/test_gpu_images.py. Pixel values may differ from Pillow's within the bounds the
parity test checks (PSNR >= 35 dB, mean absolute difference <= 2).
"""

from __future__ import annotations

import threading

from . import cpu_images
from .cpu_images import BadImage, check_raw, resize_geometry

# Every nvImageCodec, CV-CUDA and (beyond what numpy shares) CuPy call made here, with the
# positional-argument count and the keywords passed (as gpu.RAPIDS_CALLS):
# tests/backends/test_gpu_images_api.py binds each against the installed release's signature
# (nvImageCodec's docstrings; CV-CUDA's .pyi stub, as CV-CUDA does not import without a GPU;
# CuPy's own), and checks the enum members named.
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
    ("cvcuda.as_tensor", 2, ()),
    ("cvcuda.hq_resize_into", 2, ("antialias", "interpolation", "roi")),
    # the CuPy calls beyond numpy's common ground (the frame path's staging, phash, outputs)
    ("cupy.cuda.alloc_pinned_memory", 1, ()),
    ("cupy.asnumpy", 1, ("stream", "out", "blocking")),
    ("cupy.cuda.Stream", 0, ()),
    ("cupy.empty", 1, ("dtype",)),
    ("cupy.broadcast_to", 2, ()),
    ("cupy.stack", 1, ()),
    ("cupy.median", 1, ("axis", "keepdims")),
]
IMAGE_ENUMS = ["nvidia.nvimgcodec.ColorSpec.SRGB", "nvidia.nvimgcodec.QualityType.QUALITY",
               "nvidia.nvimgcodec.ChromaSubsampling.CSS_420", "nvidia.nvimgcodec.ChromaSubsampling.CSS_444",
               "nvidia.nvimgcodec.ChromaSubsampling.CSS_GRAY", "nvidia.nvimgcodec.BackendKind.HW_GPU_ONLY",
               "nvidia.nvimgcodec.BackendKind.HYBRID_CPU_GPU", "nvidia.nvimgcodec.BackendKind.GPU_ONLY",
               "nvidia.nvimgcodec.LoadHintPolicy.FIXED",
               "cvcuda.Interp.NEAREST", "cvcuda.Interp.LINEAR", "cvcuda.Interp.CUBIC", "cvcuda.Interp.LANCZOS"]

# Pillow's filter -> CV-CUDA's hq_resize(_into) interpolation. hq_resize takes NEAREST, LINEAR, CUBIC,
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
BATCH_BYTES = 1 << 29                 # and at most this many bytes (decoded pixels; file bytes staged)
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
    from .gpu_tallies import count_fallback

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


def center_crop_array(a, tw: int, th: int, xp):
    """The centre tw x th of an H x W x C array as cpu_images.center_crop cuts it (no padding)."""
    h, w, _ = a.shape
    cw, ch = min(tw, w), min(th, h)
    left, top = (w - cw) // 2, (h - ch) // 2
    return xp.ascontiguousarray(a[top:top + ch, left:left + cw])


def convert_array(a, mode: str, xp):
    """An H x W x C array (C: 1 L, 3 RGB, 4 RGBA) in `mode` (RGB or L) as cpu_images.convert does it:
    L from RGB or RGBA is Pillow's integer luma (alpha ignored, as Pillow's convert("L")); RGB from L
    repeats the grey; RGB from RGBA is the picture over white, Pillow's paste with the alpha as mask
    (v * a + 255 * (255 - a), divided by 255 rounding as Pillow's DIV255)."""
    c = a.shape[2]
    if mode == "L":
        return a if c == 1 else to_mode(a[..., :3], "L", xp)
    if c == 3:
        return a
    if c == 1:
        return xp.ascontiguousarray(xp.broadcast_to(a, a.shape[:2] + (3,)))
    alpha = a[..., 3:4].astype(xp.uint32)
    t = a[..., :3].astype(xp.uint32) * alpha + 255 * (255 - alpha) + 128
    return (((t >> 8) + t) >> 8).astype(xp.uint8)


def phash_values(small, xp):
    """cpu_images.phash's DCT and median for a stack of 32 x 32 grey images (n x 32 x 32 uint8):
    the 8 x 8 lowest frequencies against their median, the bits first to last as the high to low
    bits of an int64 (numpy's packbits read big-endian)."""
    a = small.astype(xp.float64)
    basis = xp.asarray(cpu_images.DCT)
    low = (basis @ a @ basis.T)[:, :8, :8].reshape(len(a), 64)
    bits = low > xp.median(low, axis=1, keepdims=True)
    weights = xp.uint64(1) << xp.arange(63, -1, -1, dtype=xp.uint64)
    return (bits.astype(xp.uint64) * weights).sum(axis=1, dtype=xp.uint64).view(xp.int64)


NO_ALPHA = "JPEG has no alpha channel: add `convert: RGB` before encode"        # the CPU kernel's reason

# The host-transfer ledger's reasons for this module's copies to the host.
SENT_FILE_BYTES = "images: file bytes to pinned host memory (nvImageCodec decodes from host memory)"
SENT_ENCODED = "images: encoded JPEG bytes (nvImageCodec's encoder writes host memory)"
SENT_CONTROL = "images: the rows' offsets and sizes"
SENT_PILLOW = "images: pixels for Pillow (the counted fallbacks)"
SENT_PIXELS = "images: pixels to host (decode_many, resize_many: host items)"


def _upload(result):
    """A host result (pixels, w, h, c) of a CPU kernel as an H x W x C device array; a BadImage as it is."""
    import cupy as cp
    import numpy as np

    if isinstance(result, Exception):
        return result
    pixels, w, h, c = result
    return cp.asarray(np.frombuffer(pixels, np.uint8).reshape(h, w, c))


def _host_decode(item, resize_to, why: str):
    _count(why)
    data, mode, orientation, draft = item
    try:
        return cpu_images.decode(data, mode, orientation, draft, resize_to)
    except BadImage as err:
        return err


def _decode_device(items, resize_to=None) -> list:
    """items: (host bytes, mode, orientation, draft size or None). One H x W x C device array or
    BadImage per item. JPEGs are decoded on the device in batches (draft is a Pillow form of
    scaling: the device decodes at full size and resizes); resize_to: (how, W, H, filter) of the
    resize right after decode, done on the device. Pillow's results (counted) are uploaded."""
    import cupy as cp

    nv, decoder, _ = _codecs()
    out: list = [None] * len(items)
    device: list[tuple[int, object]] = []
    for i, item in enumerate(items):
        if not item[0]:                            # no bytes: the CPU kernel's reason, nothing to decode
            out[i] = _upload(_cpu(cpu_images.decode, item))
            continue
        stream, why = device_route(item[0], nv)
        if why:
            out[i] = _upload(_host_decode(item, resize_to, why))
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
                out[i] = _upload(_host_decode(items[i], resize_to, missing))
                continue
            _, mode, orientation, _ = items[i]
            rgb = cp.asarray(img.cuda())           # H x W x 3 (rows may be padded: asarray keeps the strides)
            arrays.append(to_mode(orient(rgb, orientation, cp), mode, cp))
            where.append(i)
        if resize_to is not None:
            arrays = _resize_on_device(arrays, *resize_to)
        for i, a in zip(where, arrays):
            out[i] = a
    cp.cuda.Device().synchronize()                 # nvImageCodec and CV-CUDA work on their own streams
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


def _resize_on_device(arrays: list, how: str, tw: int, th: int, filter: str) -> list:
    """fit | fill | stretch as cpu_images.resize: the same size and source region
    (cpu_images.resize_geometry; hq_resize takes the region as a fractional ROI (lowH, lowW,
    highH, highW) in pixel edges, as Pillow's box), resampled by CV-CUDA's antialiased
    hq_resize_into, one call per channel count, into outputs CuPy allocates (from the RMM pool
    where the worker routes CuPy through RMM). Arrays already at the size are returned as they are."""
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
    for c, group in todo.items():
        src, dst = cvcuda.TensorBatch(len(group)), cvcuda.TensorBatch(len(group))
        results = [cp.empty((oh, ow, c), dtype=cp.uint8) for _, (oh, ow), _ in group]
        for (i, _, _), result in zip(group, results):
            src.pushback(cvcuda.as_tensor(cp.ascontiguousarray(arrays[i]), "HWC"))
            dst.pushback(cvcuda.as_tensor(result, "HWC"))
        try:
            cvcuda.hq_resize_into(dst, src, antialias=True, interpolation=interp, roi=[roi for _, _, roi in group])
        except (RuntimeError, ValueError):         # CV-CUDA's errors: each image to Pillow, counted
            _count(HOST_RESIZE, len(group))
            results = [_pillow_resize(arrays[i], how, tw, th, filter) for i, _, _ in group]
        for (i, _, _), result in zip(group, results):
            out[i] = result
    if todo:
        cp.cuda.Device().synchronize()             # CV-CUDA works on its own stream; CuPy reads next
    return out


def _pillow_resize(array, how: str, tw: int, th: int, filter: str):
    """One device image resized by cpu_images.resize, back on the device."""
    from .gpu_device import to_host_copy

    h, w, c = array.shape
    return _upload(cpu_images.resize(to_host_copy(array, SENT_PILLOW).tobytes(), w, h, c, how, tw, th, filter))


def _phash_device(arrays: list):
    """cpu_images.phash of device arrays: grey (convert_array), 32 x 32 by the device resize
    (Lanczos, antialiased, the whole picture), then phash_values. A device int64 array."""
    import cupy as cp

    if not arrays:
        return cp.zeros(0, dtype=cp.int64)
    grey = [convert_array(a, "L", cp) for a in arrays]
    small = _resize_on_device(grey, "stretch", 32, 32, "lanczos")
    return phash_values(cp.stack([s[..., 0] for s in small]), cp)


def _encode_device(arrays: list, fmt: str, quality: int) -> list:
    """Device arrays (or BadImages, passed on) encoded: one host bytes per image (or BadImage).
    JPEG through nvImageCodec (nvJPEG's encoder; 4:2:0 below quality 95, 4:4:4 from 95, grey
    for one channel, as the CPU encodes; baseline, standard Huffman tables), its output counted in
    the ledger; PNG and WebP by Pillow, counted."""
    from .gpu_device import to_host_copy
    from .gpu_tallies import count_host_bytes

    out: list = list(arrays)
    if fmt != "jpeg":
        todo = [i for i, a in enumerate(arrays) if not isinstance(a, Exception)]
        _count(HOST_ENCODE, len(todo))
        for i in todo:
            h, w, c = arrays[i].shape
            out[i] = _cpu(cpu_images.encode, (to_host_copy(arrays[i], SENT_PILLOW).tobytes(), w, h, c), fmt, quality)
        return out
    nv, _, encoder = _codecs()
    groups: dict[int, list[int]] = {}             # channels -> rows
    for i, a in enumerate(arrays):
        if isinstance(a, Exception):
            continue
        if a.shape[2] == 4:
            out[i] = BadImage(NO_ALPHA)
        else:
            groups.setdefault(a.shape[2], []).append(i)
    css = nv.ChromaSubsampling.CSS_420 if quality < 95 else nv.ChromaSubsampling.CSS_444
    for c, rows in groups.items():
        params = nv.EncodeParams(quality_type=nv.QualityType.QUALITY, quality_value=float(quality),
                                 chroma_subsampling=nv.ChromaSubsampling.CSS_GRAY if c == 1 else css,
                                 jpeg_encode_params=nv.JpegEncodeParams(progressive=False, optimized_huffman=False))
        for start, stop in _batches([arrays[i].size for i in rows]):
            chunk = rows[start:stop]
            try:
                streams = encoder.encode([nv.as_image(arrays[i]) for i in chunk], "jpeg", params=params)
            except RuntimeError:                   # the whole batch: each image to Pillow, counted
                streams = [None] * len(chunk)
            for i, stream in zip(chunk, streams):
                if stream is None:
                    _count(HOST_UNENCODED)
                    h, w, c = arrays[i].shape
                    out[i] = _cpu(cpu_images.encode, (to_host_copy(arrays[i], SENT_PILLOW).tobytes(), w, h, c),
                                  fmt, quality)
                else:
                    out[i] = bytes(stream)
                    count_host_bytes(SENT_ENCODED, len(out[i]))
    return out


def _cpu(func, item, *args):
    try:
        return func(*item, *args)
    except BadImage as err:
        return err


# -- host items (the CPU kernels' form): the kernel parity tests --------------------------------

def _to_host(results: list) -> list:
    """Device arrays -> (pixels, w, h, c) with host pixels: one copy for all of them (through
    the host-transfer ledger), each image a memoryview into it; BadImages as they are."""
    import cupy as cp

    from .gpu_device import to_host_copy

    arrays = [a for a in results if not isinstance(a, Exception)]
    if not arrays:
        return list(results)
    host = memoryview(to_host_copy(cp.concatenate([a.ravel() for a in arrays]), SENT_PIXELS))
    out, start = [], 0
    for a in results:
        if isinstance(a, Exception):
            out.append(a)
            continue
        h, w, c = a.shape
        out.append((host[start:start + a.size], w, h, c))
        start += a.size
    return out


def _items_to_device(items: list) -> list:
    """Host (pixels, w, h, c) -> H x W x C device arrays (BadImage where they are not raw pixels)."""
    out = []
    for pixels, w, h, c in items:
        try:
            check_raw(pixels, w, h, c)
        except BadImage as err:
            out.append(err)
            continue
        out.append(_upload((pixels, w, h, c)))
    return out


def decode_on_device(items, resize_to=None) -> list:
    """`_decode_device` for the Loader's CUDA path (gpu_loader.py): one H x W x C device array or
    BadImage per (host bytes, mode, orientation, draft) item, the device synchronised."""
    return _decode_device(items, resize_to)


def decode_many(items, resize_to=None):
    """`_decode_device` with the pixels brought to the host."""
    return _to_host(_decode_device(items, resize_to))


def resize_many(items, how: str, tw: int, th: int, filter: str):
    """Host pixels resized on the device; pixels already at the size are handed on unchanged."""
    out: list = list(items)
    arrays = _items_to_device(items)
    todo = [i for i, a in enumerate(arrays)
            if isinstance(a, Exception) or resize_geometry(a.shape[1], a.shape[0], how, tw, th)[0] != a.shape[1::-1]]
    done = _to_host(_resize_on_device_checked([arrays[i] for i in todo], how, tw, th, filter))
    for i, r in zip(todo, done):
        out[i] = r
    return out


def _resize_on_device_checked(arrays: list, how: str, tw: int, th: int, filter: str) -> list:
    """_resize_on_device of the arrays, BadImages passed on, in batches of BATCH_IMAGES / BATCH_BYTES."""
    import cupy as cp

    out = list(arrays)
    rows = [i for i, a in enumerate(arrays) if not isinstance(a, Exception)]
    for start, stop in _batches([arrays[i].size for i in rows]):
        chunk = rows[start:stop]
        for i, r in zip(chunk, _resize_on_device([arrays[i] for i in chunk], how, tw, th, filter)):
            out[i] = r
    cp.cuda.Device().synchronize()
    return out


def encode_many(items, fmt: str, quality: int):
    """Host pixels encoded on the device (`_encode_device`); raw: the bytes as they are."""
    if fmt == "raw":
        return [_cpu(cpu_images.encode, item, fmt, quality) for item in items]
    return _encode_device(_items_to_device(items), fmt, quality)


# -- the frame: steps/images.py's steps with the pixels kept in the device column ---------------

PIXEL_COLUMNS = ("width", "height", "channels", "format")


class _Frame:
    """One frame's `image` column on the device: each row's bytes as a CuPy view of the column's
    buffer (None for a null), with the rows' offsets and the pixel columns on the host."""

    def __init__(self, backend, df, names=PIXEL_COLUMNS):
        from .gpu_device import to_host_copy

        offsets, data, valid = backend.string_buffers(df["image"])
        self.backend, self.df, self.data = backend, df, data
        self.offsets = to_host_copy(offsets, SENT_CONTROL).astype("int64")
        valid = to_host_copy(valid, SENT_CONTROL)
        self.views = [data[self.offsets[i]:self.offsets[i + 1]] if valid[i] else None for i in range(len(df))]
        self.meta = {n: to_host_copy(df[n], SENT_CONTROL).to_pylist() for n in names}

    def pixels(self, step: str) -> list:
        """Each row as an H x W x C device view, or the BadImage the CPU step gives it."""
        out: list = []
        for view, w, h, c, fmt in zip(self.views, *(self.meta[n] for n in PIXEL_COLUMNS)):
            if fmt != "raw":
                out.append(BadImage(f"{step} needs decoded pixels (this image is {fmt}): put decode before it"))
            elif view is None or None in (w, h, c) or c not in cpu_images.MODES or view.size != w * h * c:
                out.append(BadImage(f"not raw pixels of {w}x{h}x{c} (decode before this step)"))
            else:
                out.append(view.reshape(h, w, c))
        return out

    def on_host(self, rows: list[int], stream=None):
        """The rows' bytes in pinned host memory (nvImageCodec and Pillow read host memory): one
        copy for each run of consecutive rows (a decode batch is one run). Returns a function
        that gives a memoryview per row (empty for a null) once the copies are done: with a CuPy
        `stream` they are queued on it and run while the caller does other work (the decode of
        the batch before)."""
        import cupy as cp
        import numpy as np

        from .gpu_tallies import count_host_bytes

        runs: list[list[int]] = []
        for i in rows:
            if runs and runs[-1][-1] == i - 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        at = self.offsets
        total = int(sum(at[run[-1] + 1] - at[run[0]] for run in runs))
        staged = np.frombuffer(cp.cuda.alloc_pinned_memory(max(total, 1)), np.uint8, total)
        pos, out = 0, []
        for run in runs:
            lo, hi = at[run[0]], at[run[-1] + 1]
            cp.asnumpy(self.data[lo:hi], stream=stream, out=staged[pos:pos + hi - lo], blocking=stream is None)
            out += [memoryview(staged[pos + at[i] - lo:pos + at[i + 1] - lo]) for i in run]
            pos += hi - lo
        count_host_bytes(SENT_FILE_BYTES, total)

        def ready() -> list:
            if stream is not None:
                stream.synchronize()
            return out
        return ready

    def result(self, results: list, keep_format: str | None = "raw", sizes=None):
        """(frame, bad mask or None, reasons or None) as steps/images.py's _apply: a row with a
        device array (or host bytes: encoded) takes it, with its size and `keep_format`; a row with
        a BadImage keeps what it had and is quarantined with the reason. `sizes`: the pixel columns
        to start from (decode: none yet)."""
        import cupy as cp
        import numpy as np

        backend, index = self.backend, self.df.index
        cols = {n: list(v) for n, v in (sizes or self.meta).items()}
        reasons: list = [None] * len(results)
        pieces: list = list(self.views)
        encoded = [i for i, r in enumerate(results) if isinstance(r, (bytes, bytearray))]
        if encoded:                                # one upload for the step's encoded bytes
            flat = cp.asarray(np.frombuffer(b"".join(results[i] for i in encoded), np.uint8))
            pos = 0
            for i in encoded:
                pieces[i], pos = flat[pos:pos + len(results[i])], pos + len(results[i])
        for i, r in enumerate(results):
            if isinstance(r, Exception):
                reasons[i] = str(r)
                continue
            if not isinstance(r, (bytes, bytearray)):
                pieces[i] = r.reshape(-1)
                cols["height"][i], cols["width"][i], cols["channels"][i] = r.shape
            if keep_format:
                cols["format"][i] = keep_format
        out = self.df.assign(image=_device_column(backend, pieces, index),
                             **{n: backend.series(cols[n], "string" if n == "format" else "int32", index=index)
                                for n in PIXEL_COLUMNS})
        return _verdict(backend, out, reasons)


def _device_column(backend, pieces: list, index):
    """A binary column over one new device buffer holding the pieces (device byte arrays; None:
    null) in order."""
    import cupy as cp
    import numpy as np

    from .gpu_device import strings_from_buffers

    bounds = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum([0 if p is None else p.size for p in pieces], out=bounds[1:])
    parts = [p for p in pieces if p is not None and p.size]
    buf = cp.concatenate(parts) if parts else cp.zeros(0, dtype=cp.uint8)
    col = backend.series(strings_from_buffers(buf, cp.asarray(bounds), len(pieces)), "binary", index=index)
    if any(p is None for p in pieces):
        col = col.where(backend.series([p is not None for p in pieces], "bool", index=index))
    return col


def _verdict(backend, df, reasons: list):
    if not any(reasons):
        return df, None, None
    index = df.index
    return (df, backend.series([r is not None for r in reasons], "bool", index=index),
            backend.series(reasons, "string", index=index))


def _each(arrays: list, func) -> list:
    return [a if isinstance(a, Exception) else func(a) for a in arrays]


def decode_step(backend, df, mode: str, resize_to=None):
    """Batches of file bytes (BATCH_IMAGES, BATCH_BYTES): those the images source kept on the
    host read where they are; those in the device column staged in pinned memory, the next
    batch's copy queued on its own stream while this batch decodes."""
    import cupy as cp
    import numpy as np

    frame = _Frame(backend, df, names=("orientation",))
    orientations = frame.meta["orientation"]
    keys, held = _take_held(backend, df)
    results: list = [None] * len(df)
    sizes = [len(h) if h is not None else 0 if v is None else v.size for h, v in zip(held, frame.views)]
    batches = [list(range(*b)) for b in _batches(sizes)]
    copies = cp.cuda.Stream()     # blocking: it waits for what the default stream wrote into the column

    def fetch(rows):
        """A function that gives the rows' bytes once they are on the host."""
        staged = [i for i in rows if held[i] is None]
        ready = frame.on_host(staged, copies) if staged else list

        def data():
            got = dict(zip(staged, ready()))
            return [held[i] if held[i] is not None else got[i] for i in rows]
        return data

    ahead = fetch(batches[0]) if batches else None
    for k, rows in enumerate(batches):
        data = ahead()
        ahead = fetch(batches[k + 1]) if k + 1 < len(batches) else None
        items = [(d, mode, orientations[i] or 1, None) for d, i in zip(data, rows)]
        for i, r in zip(rows, _decode_device(items, resize_to)):
            results[i] = r
    for i, r in enumerate(results):
        if isinstance(r, Exception) and held[i] is not None:
            # a quarantined row keeps what reached the step: its file bytes (the raw record)
            frame.views[i] = cp.asarray(np.frombuffer(held[i], np.uint8))
            _LOCAL.held[keys[i]] = held[i]         # for image_bytes (the raw record), then let go
    empty = {n: [None] * len(df) for n in PIXEL_COLUMNS}
    return frame.result(results, sizes=empty)


# -- file bytes the images source keeps on the host for decode ------------------------------------

def hold_file_bytes(backend, values: list, keys: list[tuple[int, int]], decode_next: bool):
    """GpuBackend.image_file_bytes: where decode is the next step, the file bytes stay on the host
    until it (nvImageCodec decodes from host memory: uploading them only to copy them back is a
    round trip), held for this thread by each record's (file index, offset), and the column is
    null until then. A source's read replaces what the last one held (a task that failed before
    its decode leaves nothing behind for long). Otherwise, or if two records share a key, the
    column holds the bytes on the device."""
    held = {key: v for key, v in zip(keys, values) if v is not None}
    if not decode_next or len(held) != sum(v is not None for v in values):
        _LOCAL.held = {}
        return backend.series(values, "binary")
    _LOCAL.held = held
    return backend.nulls(len(values), "binary")


def held_image_bytes(backend, rows):
    """GpuBackend.image_bytes: the rows' image column, with the file bytes held for them (the
    rows decode quarantined) put back (uploaded) and let go."""
    _, held = _take_held(backend, rows)
    if all(h is None for h in held):
        return rows["image"]
    col = backend.series(held, "binary", index=rows.index)
    return col.where(col.notna(), rows["image"])


def _take_held(backend, df) -> tuple[list, list]:
    """(each row's (file index, offset), the file bytes held for it or None), the bytes taken
    out of this thread's store. The keys come to the host (12 bytes a row) only while something
    is held."""
    store = getattr(_LOCAL, "held", None)
    if not store or not len(df):
        return [None] * len(df), [None] * len(df)
    from ..columns import FILE_INDEX, OFFSET
    from .gpu_device import to_host_copy

    keys = list(zip(to_host_copy(df[FILE_INDEX], SENT_CONTROL).to_pylist(),
                    to_host_copy(df[OFFSET], SENT_CONTROL).to_pylist()))
    return keys, [store.pop(key, None) for key in keys]


def _pixel_result(frame: _Frame, pixels: list, results: list):
    """frame.result, or the frame as it is where every row's pixels came back unchanged (a resize
    after the decode that did it, a convert to the mode the pixels have): no copy of the column."""
    if all(r is p for r, p in zip(results, pixels)) and not any(isinstance(p, Exception) for p in pixels):
        return frame.df, None, None
    return frame.result(results)


def resize_step(backend, df, how: str, tw: int, th: int, filter: str):
    frame = _Frame(backend, df)
    pixels = frame.pixels("resize")
    return _pixel_result(frame, pixels, _resize_on_device_checked(pixels, how, tw, th, filter))


def center_crop_step(backend, df, tw: int, th: int):
    import cupy as cp

    frame = _Frame(backend, df)
    pixels = frame.pixels("center_crop")
    return frame.result(_each(pixels, lambda a: center_crop_array(a, tw, th, cp)))


def convert_step(backend, df, mode: str):
    import cupy as cp

    frame = _Frame(backend, df)
    pixels = frame.pixels("convert")
    return _pixel_result(frame, pixels, _each(pixels, lambda a: convert_array(a, mode, cp)))


def encode_step(backend, df, fmt: str, quality: int):
    """As the CPU step: raw hands the bytes on as they are (no copy: the column already holds
    them); a JPEG of four channels is refused before its bytes are checked."""
    frame = _Frame(backend, df)
    pixels = frame.pixels("encode")
    if fmt == "raw":
        reasons = [str(p) if isinstance(p, Exception) and f != "raw" else None
                   for p, f in zip(pixels, frame.meta["format"])]
        return _verdict(backend, df, reasons)
    if fmt == "jpeg":
        pixels = [BadImage(NO_ALPHA) if f == "raw" and c == 4 else p
                  for p, f, c in zip(pixels, frame.meta["format"], frame.meta["channels"])]
    return frame.result(_encode_device(pixels, fmt, quality), keep_format=fmt)


def phash_step(backend, df, column: str):
    """Raw rows hashed from the column; encoded rows decoded to L first (as the CPU step)."""
    import cupy as cp

    frame = _Frame(backend, df)
    arrays: list = []
    encoded = [i for i, fmt in enumerate(frame.meta["format"]) if fmt != "raw"]
    for i, a in enumerate(frame.pixels("phash")):
        arrays.append(a if frame.meta["format"][i] == "raw" else None)
    if encoded:
        decoded = _decode_device([(d, "L", 1, None) for d in frame.on_host(encoded)()])
        for i, a in zip(encoded, decoded):
            arrays[i] = a
    rows = [i for i, a in enumerate(arrays) if not isinstance(a, Exception)]
    hashes = cp.zeros(len(df), dtype=cp.int64)
    if rows:
        hashes[cp.asarray(rows)] = _phash_device([arrays[i] for i in rows])
    values = backend.series(hashes, "int64", index=df.index)
    if len(rows) < len(df):                       # the rows without a hash: null, quarantined
        values = values.where(backend.series([not isinstance(a, Exception) for a in arrays], "bool", index=df.index))
    reasons = [str(a) if isinstance(a, Exception) else None for a in arrays]
    return _verdict(backend, df.assign(**{column: values}), reasons)
