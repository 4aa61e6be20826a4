"""The image steps on the CPU backend's frames (CpuBackend.decode_images, resize_images, ...):
each row's pixels handed to backends/cpu_images.py's per-image kernels (Pillow, simplejpeg) and
the results put back as columns. Between `decode` and `encode` the `image` column holds raw
pixels: HWC uint8 bytes, described by `width`, `height` and `channels`, with `format` "raw". An
image a kernel cannot process gets its reason: (frame, bad mask or None, reasons or None)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import cpu_images
from .cpu_images import BadImage

PIXELS = {"width": "int32", "height": "int32", "channels": "int32", "format": "string"}


def _each(one):
    """A per-image function of cpu_images over a list of items, a BadImage kept as the result."""

    def each(items, *args):
        out = []
        for item in items:
            try:
                out.append(one(*item, *args))
            except BadImage as err:
                out.append(err)
        return out
    return each


def _columns(df, backend, names: dict) -> dict[str, list]:
    """The columns as Python lists; binary values as memoryviews into the Arrow buffer (no copy:
    pixels are large, and Pillow reads them in place)."""
    table = backend.to_arrow(df, names)
    return {n: _views(table.column(n)) if t == "binary" else table.column(n).to_pylist() for n, t in names.items()}


def _views(col) -> list:
    out: list = []
    for chunk in col.chunks:
        validity, offsets, data = chunk.buffers()
        ends = np.frombuffer(offsets, np.int32, len(chunk) + 1, chunk.offset * 4)
        view = memoryview(data) if data is not None else memoryview(b"")
        valid = chunk.is_valid().to_numpy(zero_copy_only=False) if chunk.null_count else None
        out += [view[ends[i]:ends[i + 1]] if valid is None or valid[i] else None for i in range(len(chunk))]
    return out


def _apply(df, backend, results, keep_format: str | None = "raw"):
    """(frame with the results' pixels, bad mask, reasons) from one result per row: a tuple
    (pixels, width, height, channels) or a BadImage."""
    cols = _columns(df, backend, {"image": "binary", **PIXELS})
    reasons = [str(r) if isinstance(r, Exception) else None for r in results]
    for i, r in enumerate(results):
        if reasons[i] is None:
            cols["image"][i], cols["width"][i], cols["height"][i], cols["channels"][i] = r
            if keep_format:
                cols["format"][i] = keep_format
    out = df.assign(image=_binary(cols["image"], backend, df.index),
                    **{n: backend.series(cols[n], t, index=df.index) for n, t in PIXELS.items()})
    return _verdict(out, reasons, backend)


def _binary(values: list, backend, index):
    """A binary column that wraps each value's buffer (one chunk per image) instead of copying
    them all into one: decoded pixels are large, and the Parquet writer joins each row group's
    chunks once anyway."""
    chunks = [pa.BinaryArray.from_buffers(pa.binary(), 1, [None, pa.py_buffer(np.array([0, len(v)], np.int32)),
                                                            pa.py_buffer(v)])
              if v is not None else pa.nulls(1, pa.binary()) for v in values]
    return backend.series(pa.chunked_array(chunks, pa.binary()), "binary", index=index)


def _verdict(df, reasons: list, backend):
    if not any(reasons):
        return df, None, None
    bad = backend.series([r is not None for r in reasons], "bool", index=df.index)
    return df, bad, backend.series(reasons, "string", index=df.index)


def _raw_pixels(df, backend, step: str) -> tuple[list, list]:
    """The rows as (pixels, w, h, c) items, and a reason for rows that are not raw pixels."""
    cols = _columns(df, backend, {"image": "binary", **PIXELS})
    items, reasons = [], []
    for px, w, h, c, fmt in zip(cols["image"], cols["width"], cols["height"], cols["channels"], cols["format"]):
        items.append((px, w, h, c))
        reasons.append(None if fmt == "raw" else f"{step} needs decoded pixels (this image is {fmt}): "
                                                 "put decode before it")
    return items, reasons


def _pixel_step(df, backend, step: str, kernel, *args):
    """`kernel` (a cpu_images function) on each row's raw pixels; `step` names it in reasons."""
    items, reasons = _raw_pixels(df, backend, step)
    todo = [i for i, r in enumerate(reasons) if r is None]
    done = _each(kernel)([items[i] for i in todo], *args)
    results: list = [BadImage(r) if r else None for r in reasons]
    for i, r in zip(todo, done):
        results[i] = r
    return _apply(df, backend, results)


def decode(backend, df, mode: str, resize_to=None, draft_for=None):
    """Image bytes to raw pixels; JPEGs at the smallest DCT scale `draft_for` (how, W, H)
    allows; `resize_to` (how, W, H, filter): resized before the pixels leave the decoder."""
    cols = _columns(df, backend, {"image": "binary", "orientation": "int8", "orig_width": "int32",
                                  "orig_height": "int32"})
    drafts = [cpu_images.draft_size(w, h, o, draft_for) if draft_for and w else None
              for w, h, o in zip(cols["orig_width"], cols["orig_height"], cols["orientation"])]
    items = [(data, mode, o or 1, d) for data, o, d in zip(cols["image"], cols["orientation"], drafts)]
    results = _each(cpu_images.decode)(items, *((resize_to,) if resize_to else ()))
    out = df.assign(**{n: backend.nulls(len(df), t, index=df.index) for n, t in PIXELS.items()})
    return _apply(out, backend, results)


def resize(backend, df, how: str, width: int, height: int, filter: str):
    return _pixel_step(df, backend, "resize", cpu_images.resize, how, width, height, filter)


def center_crop(backend, df, width: int, height: int):
    return _pixel_step(df, backend, "center_crop", cpu_images.center_crop, width, height)


def convert(backend, df, mode: str):
    return _pixel_step(df, backend, "convert", cpu_images.convert, mode)


def encode(backend, df, fmt: str, quality: int):
    items, reasons = _raw_pixels(df, backend, "encode")
    todo = [i for i, r in enumerate(reasons) if r is None]
    done = _each(cpu_images.encode)([items[i] for i in todo], fmt, quality)
    results: list = [BadImage(r) if r else None for r in reasons]
    for i, r in zip(todo, done):
        results[i] = r if isinstance(r, Exception) else (r, *items[i][1:])
    return _apply(df, backend, results, keep_format=fmt)


def phash(backend, df, column: str):
    """Raw rows hashed from the column; encoded rows decoded to L first."""
    cols = _columns(df, backend, {"image": "binary", **PIXELS})
    items = [(px, w, h, c) if fmt == "raw" else px
             for px, w, h, c, fmt in zip(cols["image"], cols["width"], cols["height"], cols["channels"], cols["format"])]
    results: list = [None] * len(items)
    for i, item in enumerate(items):
        try:
            pixels = item if isinstance(item, tuple) else cpu_images.decode(item, "L", 1)
            results[i] = cpu_images.phash(*pixels)
        except BadImage as err:
            results[i] = err
    reasons = [str(r) if isinstance(r, Exception) else None for r in results]
    values = [None if isinstance(r, Exception) else r for r in results]
    out = df.assign(**{column: backend.series(values, "int64", index=df.index)})
    return _verdict(out, reasons, backend)
