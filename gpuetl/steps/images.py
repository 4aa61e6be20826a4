"""Image steps: decode, resize, center_crop, convert, encode, phash (an `images` source).

Between `decode` and `encode` the `image` column holds raw pixels: HWC uint8 bytes, described by
`width`, `height` and `channels` (1, 3 or 4), with `format` "raw". The pixel work is the
backend's, through its typed image methods (`Backend.decode_images`, `resize_images`, ...:
backends/cpu_image_steps.py with Pillow; backends/gpu_images.py with nvImageCodec and CV-CUDA,
not run on a GPU yet); these steps only check columns and hand over their parameters. An image a step cannot process is quarantined with the reason
and its bytes as they reached the step.
"""

from __future__ import annotations

import copy
from typing import Literal

from pydantic import Field, RootModel, field_validator

from ..types import Schema
from .base import Params, Binding, RowStep, StepError, register

PIXELS = {"width": "int32", "height": "int32", "channels": "int32", "format": "string"}


def _needs(schema: Schema, names, hint: str) -> None:
    missing = [n for n in names if n not in schema]
    if missing:
        raise StepError(f"needs the column(s) {', '.join(missing)}; {hint}")


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
        return backend.decode_images(df, self.params.mode, resize_to=self.resize_to, draft_for=self.target)

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
        return backend.resize_images(df, p.mode, *p.size, p.filter)


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
        return backend.center_crop_images(df, *self.params.size)


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
        return backend.convert_images(df, self.params.root)


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
        return backend.encode_images(df, self.params.format, self.params.quality)


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
        return backend.phash_images(df, self.params.column)
