"""Image steps: decode, resize, center_crop, convert, encode, phash (an `images` source).

Between `decode` and `encode` the `image` column holds raw pixels: HWC uint8 bytes, described by
`width`, `height` and `channels` (1, 3 or 4), with `format` "raw". The pixel work is the
backend's (backends/cpu_images.py: Pillow; backends/gpu_images.py: nvImageCodec and CV-CUDA,
not run on a GPU yet); these steps only move columns. An image a step cannot process is quarantined with the reason
and its bytes as they reached the step.
"""

from __future__ import annotations

import copy
import importlib
from typing import Literal

from pydantic import Field, RootModel, field_validator

from ..types import Schema
from .base import Params, Binding, RowStep, StepError, register

PIXELS = {"width": "int32", "height": "int32", "channels": "int32", "format": "string"}
KERNELS = {"gpu": "gpuetl.backends.gpu_images"}     # backend name -> module with batch functions


def _kernel(backend, name: str):
    """The backend's batch function `name`_many, or the CPU's per-image function in a loop."""
    from ..backends import cpu_images      # Pillow: imported when an image step runs, not with the registry

    module = KERNELS.get(backend.name)
    if module:
        batch = getattr(importlib.import_module(module), f"{name}_many", None)
        if batch is not None:
            return batch
    one = getattr(cpu_images, name)

    def each(items, *args):
        out = []
        for item in items:
            try:
                out.append(one(*item, *args))
            except cpu_images.BadImage as err:
                out.append(err)
        return out
    return each


def _needs(schema: Schema, names, hint: str) -> None:
    missing = [n for n in names if n not in schema]
    if missing:
        raise StepError(f"needs the column(s) {', '.join(missing)}; {hint}")


def _columns(df, backend, names: dict) -> dict[str, list]:
    """The columns as Python lists; binary values as memoryviews into the Arrow buffer (no copy:
    pixels are large, and Pillow reads them in place)."""
    table = backend.to_arrow(df, names)
    return {n: _views(table.column(n)) if t == "binary" else table.column(n).to_pylist() for n, t in names.items()}


def _views(col) -> list:
    import numpy as np

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
    import numpy as np
    import pyarrow as pa

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


def _pixel_step(df, backend, step: str, name: str, *args):
    from ..backends import cpu_images

    on_backend = backend.image_step(name, df, *args)      # the GPU keeps the pixels on the device
    if on_backend is not None:
        return on_backend
    items, reasons = _raw_pixels(df, backend, step)
    todo = [i for i, r in enumerate(reasons) if r is None]
    done = _kernel(backend, name)([items[i] for i in todo], *args)
    results: list = [cpu_images.BadImage(r) if r else None for r in reasons]
    for i, r in zip(todo, done):
        results[i] = r
    return _apply(df, backend, results)


class _ImageRaw:
    """Quarantined rows keep the image as it reached the step (bytes, not JSON)."""

    def raw_record(self, rows, backend):
        return backend.image_bytes(rows)


Size = int | list[int]      # YAML has lists, not tuples (the parameter models are strict)


def _size(v) -> list[int]:
    if isinstance(v, (list, tuple)) and len(v) != 2:
        raise ValueError("size is [width, height], or one number for a square")
    w, h = (v, v) if isinstance(v, int) else v
    if not (0 < w <= 65535 and 0 < h <= 65535):
        raise ValueError("width and height are whole numbers from 1 to 65535")
    return [w, h]


# -- decode --------------------------------------------------------------------------------

class DecodeParams(Params):
    mode: Literal["RGB", "L", "RGBA"] = Field("RGB", description="the pixels' channels after decoding")
    draft: bool = Field(True, description="JPEG: decode at a reduced DCT scale (n/8) when a later resize allows")


@register
class Decode(_ImageRaw, RowStep):
    """Image bytes to raw pixels (HWC uint8, `format` raw). CMYK, palette, 16-bit, grey and alpha
    images are converted to `mode` (alpha over white for RGB); the source's EXIF orientation is
    applied (`source.exif_transpose: false` turns it off). Where a later `resize` makes the image
    smaller, JPEGs are decoded with libjpeg-turbo's DCT scaling at the smallest n/8 scale (1/8 to
    8/8) still at least the size that resize needs, through simplejpeg (Pillow's `draft`, 1/2,
    1/4 or 1/8, for CMYK JPEGs, `mode: RGBA` and what simplejpeg refuses): a 500×375 photo for a
    224×224 fill decodes at 5/8 (313×235). The pixels differ slightly from a full decode's (the
    resize is the same antialiased filter); `draft: false` decodes at full size. A `resize`
    right after decode is done on the decoded image before its pixels are handed on, with the
    size and region a full decode would give. Corrupt or truncated images are quarantined.
    (backends/gpu_images.py holds the GPU form, nvImageCodec batch decoding; it has not run on a
    GPU yet, so image pipelines run on the CPU backend.)"""

    name = "decode"
    summary = "Decode image bytes to raw pixels (RGB, L or RGBA), upright per EXIF."
    example = "- decode: {mode: RGB}"
    Params = DecodeParams

    def __init__(self, params):
        super().__init__(params)
        self.target = None            # (how, W, H) of the resize that follows, for draft decoding
        self.resize_to = None         # (how, W, H, filter) of a resize right after: done while decoding

    @classmethod
    def from_raw(cls, raw):
        return super().from_raw({} if raw is None else raw)

    def look_ahead(self, later: list) -> "Decode":
        """A copy that decodes JPEGs at the smallest DCT scale the first resize after it
        allows (only convert may come between: a crop or anything else needs the full size),
        and, where that resize comes right after, resizes before the pixels leave the decoder:
        the full-size pixels are not copied out and back in (the resize step then finds them
        at size, and passes them on)."""
        ahead = copy.copy(self)
        if later and isinstance(later[0], Resize):
            p = later[0].params
            ahead.resize_to = (p.mode, *p.size, p.filter)
        if self.params.draft:
            for step in later:
                if isinstance(step, Resize):
                    ahead.target = (step.params.mode, *step.params.size)
                    break
                if not isinstance(step, Convert):
                    break
        return ahead if (ahead.target, ahead.resize_to) != (self.target, self.resize_to) else self

    def __dask_tokenize__(self):
        return (*super().__dask_tokenize__(), self.target, self.resize_to)     # what look_ahead set

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, ["image", "orientation"], "decode reads an images source's image column")
        if taken := [n for n in PIXELS if n in schema]:      # a side-file field or tar member `width`
            raise StepError(f"the column(s) {', '.join(map(repr, taken))} exist already (a side-file field or "
                            "a tar member's extension?); decode writes the pixels' size and format there: "
                            "rename that field or extension")
        out = {k: v for k, v in schema.items() if k != "orientation"}
        return Binding({**out, **PIXELS})

    def quarantine(self, df, backend):
        from ..backends import cpu_images

        done = backend.image_step("decode", df, self.params.mode, self.resize_to)
        if done is not None:
            return done
        cols = _columns(df, backend, {"image": "binary", "orientation": "int8", "orig_width": "int32",
                                      "orig_height": "int32"})
        drafts = [cpu_images.draft_size(w, h, o, self.target) if self.target and w else None
                  for w, h, o in zip(cols["orig_width"], cols["orig_height"], cols["orientation"])]
        items = [(data, self.params.mode, o or 1, d) for data, o, d in zip(cols["image"], cols["orientation"], drafts)]
        fused = (self.resize_to,) if self.resize_to else ()    # gpu_images.decode_many resizes on the device
        results = _kernel(backend, "decode")(items, *fused)
        out = df.assign(**{n: backend.nulls(len(df), t, index=df.index) for n, t in PIXELS.items()})
        return _apply(out, backend, results)

    def transform(self, df, backend):
        return df.drop(columns=["orientation"])


# -- resize, center_crop, convert ----------------------------------------------------------

class ResizeParams(Params):
    size: Size = Field(description="W×H: [width, height], or one number for a square")
    mode: Literal["fit", "fill", "stretch"] = Field(
        "fit", description="fit: within W×H, aspect kept; fill: cover W×H, then centre crop; stretch: exactly W×H")
    filter: Literal["nearest", "box", "bilinear", "hamming", "bicubic", "lanczos"] = Field(
        "bicubic", description="the resampling filter (antialiased when shrinking, except nearest)")

    @field_validator("size")
    @classmethod
    def _check_size(cls, v):
        return _size(v)


@register
class Resize(_ImageRaw, RowStep):
    """Resize decoded pixels. `fit` keeps the aspect ratio within W×H; `fill` scales to cover W×H
    and cuts out the centre (one resampling of that region); `stretch` ignores the aspect ratio.
    CPU: Pillow's antialiased resampling with the named filter (GPU form: CV-CUDA's antialiased
    `hq_resize`, cubic, linear or area as the filter maps)."""

    name = "resize"
    summary = "Resize pixels to W×H: fit, fill (scale then centre crop) or stretch; antialiased."
    example = "- resize: {size: [224, 224], mode: fill, filter: bicubic}"
    Params = ResizeParams

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, list(PIXELS), "put decode before resize")
        return Binding(dict(schema))

    def quarantine(self, df, backend):
        p = self.params
        return _pixel_step(df, backend, "resize", "resize", p.mode, *p.size, p.filter)


class CropParams(Params):
    size: Size = Field(description="W×H: [width, height], or one number for a square")

    @field_validator("size")
    @classmethod
    def _check_size(cls, v):
        return _size(v)


@register
class CenterCrop(_ImageRaw, RowStep):
    """Cut out the centre W×H of decoded pixels. A side shorter than asked stays as it is (no
    padding)."""

    name = "center_crop"
    summary = "Cut out the centre W×H of the pixels."
    example = "- center_crop: {size: 224}"
    Params = CropParams

    @classmethod
    def from_raw(cls, raw):
        return super().from_raw({"size": raw} if isinstance(raw, (int, list)) else raw)

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, list(PIXELS), "put decode before center_crop")
        return Binding(dict(schema))

    def quarantine(self, df, backend):
        return _pixel_step(df, backend, "center_crop", "center_crop", *self.params.size)


class ConvertParams(RootModel[Literal["RGB", "L"]]):
    pass                # a named class: pickled by reference, as a generic alias cannot be


@register
class Convert(_ImageRaw, RowStep):
    """Convert decoded pixels to RGB (3 channels) or L (grey, 1 channel)."""

    name = "convert"
    summary = "Convert pixels to RGB or L (grey)."
    example = "- convert: L"
    Params = ConvertParams

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, list(PIXELS), "put decode before convert")
        return Binding(dict(schema))

    def quarantine(self, df, backend):
        return _pixel_step(df, backend, "convert", "convert", self.params.root)


# -- encode ----------------------------------------------------------------------------------

class EncodeParams(Params):
    format: Literal["jpeg", "png", "webp", "raw"] = Field("jpeg", description="raw: HWC uint8 bytes as they are")
    quality: int = Field(90, ge=1, le=100, description="jpeg and webp")


@register
class Encode(_ImageRaw, RowStep):
    """Encode decoded pixels as JPEG (quality; 4:2:0 below 95, 4:4:4 from 95; baseline, no
    Huffman optimisation; libjpeg-turbo through simplejpeg), PNG, WebP (quality) or raw HWC
    uint8 bytes. The bytes depend only on the pixels and the parameters: no metadata is
    written. `format` names the result."""

    name = "encode"
    summary = "Encode pixels as jpeg (quality), png, webp or raw uint8 HWC."
    example = "- encode: {format: jpeg, quality: 90}"
    Params = EncodeParams

    @classmethod
    def from_raw(cls, raw):
        return super().from_raw({"format": raw} if isinstance(raw, str) else raw)

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, list(PIXELS), "put decode before encode")
        return Binding(dict(schema))

    def quarantine(self, df, backend):
        from ..backends import cpu_images

        done = backend.image_step("encode", df, self.params.format, self.params.quality)
        if done is not None:
            return done
        items, reasons = _raw_pixels(df, backend, "encode")
        todo = [i for i, r in enumerate(reasons) if r is None]
        done = _kernel(backend, "encode")([items[i] for i in todo], self.params.format, self.params.quality)
        results: list = [cpu_images.BadImage(r) if r else None for r in reasons]
        for i, r in zip(todo, done):
            results[i] = r if isinstance(r, Exception) else (r, *items[i][1:])
        return _apply(df, backend, results, keep_format=self.params.format)


# -- phash -----------------------------------------------------------------------------------

class PhashParams(Params):
    column: str = Field("phash", description="the name of the new int64 column")


@register
class Phash(_ImageRaw, RowStep):
    """A 64-bit perceptual hash (pHash: grey 32×32, DCT, the 8×8 lowest frequencies against their
    median) as int64, for `dedupe: {on: [phash]}`; `content_hash` (the source's sha256 of the
    input bytes) is the exact one. Works on decoded pixels or on encoded images (decoded for the
    hash only)."""

    name = "phash"
    summary = "Add a 64-bit perceptual hash (int64) of the image, for dedupe."
    example = "- phash: {column: phash}"
    Params = PhashParams

    @classmethod
    def from_raw(cls, raw):
        return super().from_raw({} if raw is None else raw)

    def derive(self, schema: Schema) -> Binding:
        _needs(schema, list(PIXELS), "put decode before phash")
        if self.params.column in schema:
            raise StepError(f"the column {self.params.column!r} exists already; name another with column:")
        return Binding({**schema, self.params.column: "int64"})

    def quarantine(self, df, backend):
        from ..backends import cpu_images

        done = backend.image_step("phash", df, self.params.column)
        if done is not None:
            return done
        cols = _columns(df, backend, {"image": "binary", **PIXELS})
        items, todo = [], []
        for px, w, h, c, fmt in zip(cols["image"], cols["width"], cols["height"], cols["channels"], cols["format"]):
            items.append((px, w, h, c) if fmt == "raw" else px)
        results: list = [None] * len(items)
        for i, item in enumerate(items):
            try:
                pixels = item if isinstance(item, tuple) else cpu_images.decode(item, "L", 1)
                results[i] = cpu_images.phash(*pixels)
            except cpu_images.BadImage as err:
                results[i] = err
        reasons = [str(r) if isinstance(r, Exception) else None for r in results]
        values = [None if isinstance(r, Exception) else r for r in results]
        out = df.assign(**{self.params.column: backend.series(values, "int64", index=df.index)})
        return _verdict(out, reasons, backend)
