"""Image work on the GPU, a batch at a time: nvImageCodec (nvJPEG, with the hardware JPEG
decoder where the GPU has one) decodes into device memory, CV-CUDA resizes with antialiasing
(`hq_resize`), nvImageCodec encodes. The steps (steps/images.py) call the `*_many` functions
here on the GPU backend; a step without one here (center_crop, convert, phash) uses the CPU's
per-image function. Results are host bytes, as on the CPU, so shards and quarantine rows look
the same; a problem with one image is a BadImage in its place, never an exception.

Written against nvidia-nvimgcodec-cu13 and cvcuda-cu13; like gpu.py, imported only on the GPU
backend, and tested on a GPU (tests marked `gpu`). Pixel values may differ from Pillow's within
the bounds the parity test checks (PSNR >= 35 dB, mean absolute difference <= 2).
"""

from __future__ import annotations

import functools

from .cpu_images import BadImage, check_raw, resize_geometry

# Every nvImageCodec and CV-CUDA call made here, with the positional-argument count and the
# keywords passed (as gpu.RAPIDS_CALLS): tests/backends/test_gpu_images_api.py binds each against
# the installed release's signature (nvImageCodec's docstrings; CV-CUDA's .pyi stub, as CV-CUDA
# does not import without a GPU), and checks the enum members named.
IMAGE_CALLS: list[tuple[str, int, tuple[str, ...]]] = [
    ("nvidia.nvimgcodec.Decoder", 0, ()),
    ("nvidia.nvimgcodec.Encoder", 0, ()),
    ("nvidia.nvimgcodec.CodeStream", 1, ()),
    ("nvidia.nvimgcodec.DecodeParams", 0, ("color_spec", "apply_exif_orientation")),
    ("nvidia.nvimgcodec.Decoder.decode", 1, ("params",)),
    ("nvidia.nvimgcodec.as_image", 1, ()),
    ("nvidia.nvimgcodec.EncodeParams", 0, ("quality_type", "quality_value", "chroma_subsampling")),
    ("nvidia.nvimgcodec.Encoder.encode", 2, ("params",)),
    ("cvcuda.as_tensor", 2, ()),
    ("cvcuda.hq_resize", 2, ("antialias", "interpolation", "roi")),
]
IMAGE_ENUMS = ["nvidia.nvimgcodec.ColorSpec.GRAY", "nvidia.nvimgcodec.ColorSpec.SRGB",
               "nvidia.nvimgcodec.QualityType.QUALITY", "nvidia.nvimgcodec.ChromaSubsampling.CSS_420",
               "cvcuda.Interp.NEAREST", "cvcuda.Interp.AREA", "cvcuda.Interp.LINEAR", "cvcuda.Interp.CUBIC"]

INTERP = {"nearest": "NEAREST", "box": "AREA", "bilinear": "LINEAR", "hamming": "LINEAR", "bicubic": "CUBIC",
          "lanczos": "CUBIC"}      # CV-CUDA has no Lanczos or Hamming: the nearest kernel it has


@functools.lru_cache(maxsize=1)
def _codec():
    from nvidia import nvimgcodec

    return nvimgcodec, nvimgcodec.Decoder(), nvimgcodec.Encoder()


def decode_many(items):
    """items: (bytes, mode, orientation, draft size or None). nvImageCodec applies the EXIF
    orientation itself; orientation 1 (exif_transpose off, or none) turns that off."""
    import cupy as cp

    nvimgcodec, decoder, _ = _codec()
    out: list = [None] * len(items)
    groups: dict[tuple, list[int]] = {}
    for i, (_, mode, orientation, _) in enumerate(items):
        groups.setdefault((mode, orientation != 1), []).append(i)
    for (mode, exif), idx in groups.items():
        spec = {"L": nvimgcodec.ColorSpec.GRAY, "RGB": nvimgcodec.ColorSpec.SRGB}.get(mode)
        if spec is None:                      # RGBA: nvImageCodec keeps alpha only unchanged; use the CPU
            from . import cpu_images

            for i in idx:
                try:
                    out[i] = cpu_images.decode(*items[i])
                except BadImage as err:
                    out[i] = err
            continue
        params = nvimgcodec.DecodeParams(color_spec=spec, apply_exif_orientation=exif)
        streams = {}
        for i in idx:
            try:                              # parses the header: garbage fails here, on the host
                streams[i] = nvimgcodec.CodeStream(bytes(items[i][0]))
            except RuntimeError as err:
                out[i] = BadImage(f"cannot decode the image (nvImageCodec: {err})")
        idx = list(streams)
        images = decoder.decode([streams[i] for i in idx], params=params) if idx else []
        for i, img in zip(idx, images):
            if img is None:
                out[i] = BadImage("cannot decode the image (nvImageCodec)")
                continue
            arr = cp.asarray(img)
            h, w = arr.shape[:2]
            out[i] = (cp.asnumpy(arr).tobytes(), w, h, 1 if arr.ndim == 2 else arr.shape[2])
    return out


def resize_many(items, how: str, tw: int, th: int, filter: str):
    """fit | fill | stretch as backends/cpu_images.resize: the same size and source region
    (cpu_images.resize_geometry; CV-CUDA takes the region as a fractional ROI), resampled by
    CV-CUDA's antialiased resize."""
    import cupy as cp
    import cvcuda

    interp = getattr(cvcuda.Interp, INTERP[filter])
    out: list = []
    for pixels, w, h, c in items:
        try:
            check_raw(pixels, w, h, c)
        except BadImage as err:
            out.append(err)
            continue
        (ow, oh), box = resize_geometry(w, h, how, tw, th)
        if (ow, oh) == (w, h):                # at the size already: as the CPU, unchanged
            out.append((pixels, w, h, c))
            continue
        arr = cp.asarray(memoryview(pixels)).reshape(h, w, c)
        roi = None if box is None else (box[1], box[0], box[3], box[2])   # (lowH, lowW, highH, highW)
        tensor = cvcuda.as_tensor(arr[None], "NHWC")
        resized = cvcuda.hq_resize(tensor, (oh, ow), antialias=True, interpolation=interp, roi=roi)
        host = cp.asnumpy(cp.asarray(resized.cuda())[0])
        out.append((host.tobytes(), ow, oh, c))
    return out


def encode_many(items, fmt: str, quality: int):
    """JPEG and WebP through nvImageCodec (JPEG on nvJPEG); PNG and raw as the CPU does them."""
    import cupy as cp

    from . import cpu_images

    if fmt not in ("jpeg",):
        return [_cpu(cpu_images.encode, item, fmt, quality) for item in items]
    nvimgcodec, _, encoder = _codec()
    out: list = [None] * len(items)
    batch, idx = [], []
    for i, (pixels, w, h, c) in enumerate(items):
        if c == 4:
            out[i] = BadImage("JPEG has no alpha channel: add `convert: RGB` before encode")
            continue
        batch.append(nvimgcodec.as_image(cp.asarray(memoryview(pixels)).reshape(h, w, c)))
        idx.append(i)
    params = nvimgcodec.EncodeParams(quality_type=nvimgcodec.QualityType.QUALITY, quality_value=float(quality),
                                     chroma_subsampling=nvimgcodec.ChromaSubsampling.CSS_420)
    for i, data in zip(idx, encoder.encode(batch, "jpeg", params=params) if batch else []):
        out[i] = bytes(data) if data is not None else BadImage("cannot encode the image (nvImageCodec)")
    return out


def _cpu(func, item, *args):
    try:
        return func(*item, *args)
    except BadImage as err:
        return err
