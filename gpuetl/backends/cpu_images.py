"""Image work on the CPU, one image at a time, with Pillow (libjpeg-turbo, libpng, libwebp).

Pixels between `decode` and `encode` are raw HWC uint8 bytes with their width, height and
channels (1: L, 3: RGB, 4: RGBA). Each function takes and returns plain bytes, so the steps
(steps/images.py) stay backend-neutral; a problem with one image raises BadImage with the reason
its row is quarantined with. Nothing here changes Pillow's process-wide settings: the pixel limit
is checked on the header of each image, not through `Image.MAX_IMAGE_PIXELS`.
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, UnidentifiedImageError

FORMATS = ("JPEG", "PNG", "WEBP")
MODES = {1: "L", 3: "RGB", 4: "RGBA"}
CHANNELS = {v: k for k, v in MODES.items()}
FILTERS = {"nearest": Image.Resampling.NEAREST, "box": Image.Resampling.BOX, "bilinear": Image.Resampling.BILINEAR,
           "hamming": Image.Resampling.HAMMING, "bicubic": Image.Resampling.BICUBIC,
           "lanczos": Image.Resampling.LANCZOS}
# EXIF orientation (tag 0x0112) -> what turns the stored pixels upright (1: nothing)
ORIENT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
          5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
          8: Image.Transpose.ROTATE_90}
EXIF_ORIENTATION = 0x0112


class BadImage(ValueError):
    """An image that cannot be used; the message is the quarantine reason."""


def _open(data: bytes) -> Image.Image:
    if not data:
        raise BadImage("empty file (0 bytes)")
    try:
        return Image.open(io.BytesIO(data), formats=FORMATS)
    except Image.DecompressionBombError as err:
        raise BadImage(f"over the pixel limit ({err})") from None
    except UnidentifiedImageError:
        raise BadImage("not a JPEG, PNG or WebP image (unrecognised header)") from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise BadImage(f"unreadable image header: {err}") from None


def probe(data: bytes, max_pixels: int) -> tuple[str, int, int, int]:
    """(format, width, height, EXIF orientation 1-8) from the header alone: nothing is decoded,
    so a decompression bomb costs its header's bytes."""
    img = _open(data)
    w, h = img.size
    if w <= 0 or h <= 0:
        raise BadImage(f"image header gives an empty size {w}x{h}")
    if w * h > max_pixels:
        raise BadImage(f"over the pixel limit: {w}x{h} = {w * h:,} pixels > max_pixels {max_pixels:,}")
    orientation = 1
    try:
        orientation = int(img.getexif().get(EXIF_ORIENTATION, 1))
    except Exception:           # a broken EXIF block: the pixels may still be fine; keep them upright-as-stored
        orientation = 1
    return img.format.lower(), w, h, orientation if 1 <= orientation <= 8 else 1


def draft_size(w: int, h: int, orientation: int, target) -> tuple[int, int] | None:
    """The smallest size (as stored) that `target` = (how, W, H) of a later resize still needs,
    for libjpeg's DCT scaling; None when the full size is needed."""
    if target is None:
        return None
    how, tw, th = target
    if orientation >= 5:                     # stored sideways: the target is turned too
        tw, th = th, tw
    if how == "stretch":
        return tw, th
    s = max(tw / w, th / h) if how == "fill" else min(tw / w, th / h)
    return max(1, math.ceil(w * s)), max(1, math.ceil(h * s))


def decode(data: bytes, mode: str, orientation: int, draft_to=None, resize_to=None) -> tuple[bytes, int, int, int]:
    """Decode to raw HWC uint8 in `mode` (RGB | L | RGBA). CMYK, palette, 16-bit and alpha
    images are converted; `orientation` (1-8) is applied. `draft_to`: decode JPEGs at the
    smallest DCT scale (1/2, 1/4, 1/8) that is still at least this size. `resize_to`: (how, W,
    H, filter) of the resize step that follows, done on the decoded image before its pixels
    leave Pillow (the same pixels as `resize` on them; that step then finds them at size)."""
    img = _open(data)
    try:
        if draft_to is not None and img.format == "JPEG":
            img.draft(None, draft_to)
        img.load()
    except Image.DecompressionBombError as err:
        raise BadImage(f"over the pixel limit ({err})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise BadImage(f"cannot decode the image: {err}") from None
    img = _to_mode(img, mode)
    if orientation in ORIENT:
        img = img.transpose(ORIENT[orientation])
    if resize_to is not None:
        img = _resized(img, *resize_to)
    return img.tobytes(), img.width, img.height, CHANNELS[img.mode]


def _to_mode(img: Image.Image, mode: str) -> Image.Image:
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):      # 16-bit grey: keep the top 8 bits, not a clip
        arr = np.asarray(img, dtype=np.uint32) >> 8 if img.mode != "I" else np.asarray(img) >> 8
        img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        img = Image.fromarray(np.clip(np.asarray(img), 0, 255).astype(np.uint8), "L")
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode == mode:
        return img
    if mode == "RGB" and img.mode in ("RGBA", "LA", "PA"):
        img = img.convert("RGBA")
        flat = Image.new("RGB", img.size, (255, 255, 255))  # transparent parts on white, as a viewer shows them
        flat.paste(img, mask=img.getchannel("A"))
        return flat
    return img.convert(mode)


def check_raw(pixels: bytes, w: int, h: int, c: int) -> None:
    if c not in MODES or len(pixels) != w * h * c:
        raise BadImage(f"not raw pixels of {w}x{h}x{c} (decode before this step)")


def as_image(pixels: bytes, w: int, h: int, c: int) -> Image.Image:
    """A Pillow image of raw pixels (a copy: Pillow keeps RGB as 4 bytes a pixel)."""
    check_raw(pixels, w, h, c)
    return Image.frombuffer(MODES[c], (w, h), pixels, "raw", MODES[c], 0, 1)


def _out(img: Image.Image) -> tuple[bytes, int, int, int]:
    return img.tobytes(), img.width, img.height, CHANNELS[img.mode]


def resize(pixels: bytes, w: int, h: int, c: int, how: str, tw: int, th: int, filter: str):
    """fit: within tw x th, aspect kept; fill: cover tw x th, then the centre cut out (one
    resampling of just that region); stretch: exactly tw x th. Pixels already at the size
    (decode did this resize) are returned as they are: Pillow would copy them unchanged."""
    if resize_geometry(w, h, how, tw, th)[0] == (w, h):
        check_raw(pixels, w, h, c)
        return pixels, w, h, c
    return _out(_resized(as_image(pixels, w, h, c), how, tw, th, filter))


def resize_geometry(w: int, h: int, how: str, tw: int, th: int):
    """((width, height) of the result, the source region (left, top, right, bottom) that becomes
    it, in pixel edges, fractions kept; None: the whole image). Both backends resample exactly
    this region (backends/gpu_images.py passes it to CV-CUDA as the ROI), so their crops agree."""
    if how == "stretch":
        return (tw, th), None
    if how == "fit":
        s = min(tw / w, th / h)
        return (max(1, round(w * s)), max(1, round(h * s))), None
    s = max(tw / w, th / h)
    # the source region that becomes tw x th, within the image (tw / (tw / w) can be w plus an
    # ulp, and Pillow refuses a box that starts before the image)
    cw, ch = min(tw / s, w), min(th / s, h)
    return (tw, th), ((w - cw) / 2, (h - ch) / 2, (w + cw) / 2, (h + ch) / 2)


def _resized(img: Image.Image, how: str, tw: int, th: int, filter: str) -> Image.Image:
    size, box = resize_geometry(*img.size, how, tw, th)
    return img.resize(size, FILTERS[filter], box=box)


def center_crop(pixels: bytes, w: int, h: int, c: int, tw: int, th: int):
    """The centre tw x th (no padding: a smaller side stays as it is)."""
    img = as_image(pixels, w, h, c)
    cw, ch = min(tw, w), min(th, h)
    left, top = (w - cw) // 2, (h - ch) // 2
    return _out(img.crop((left, top, left + cw, top + ch)))


def convert(pixels: bytes, w: int, h: int, c: int, mode: str):
    return _out(_to_mode(as_image(pixels, w, h, c), mode))


def encode(pixels: bytes, w: int, h: int, c: int, fmt: str, quality: int) -> bytes:
    """Deterministic bytes: no metadata, fixed settings."""
    if fmt == "raw":
        return bytes(pixels)
    img = as_image(pixels, w, h, c)
    if fmt == "jpeg" and c == 4:
        raise BadImage("JPEG has no alpha channel: add `convert: RGB` before encode")
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, "JPEG", quality=quality, optimize=False, subsampling=2 if quality < 95 else 0)
    elif fmt == "png":
        img.save(buf, "PNG", compress_level=6)
    else:
        img.save(buf, "WEBP", quality=quality, method=4)
    return buf.getvalue()


_N = np.arange(32)
_DCT = np.cos(np.pi * (2 * _N[None, :] + 1) * _N[:, None] / 64)     # DCT-II basis, rows = frequency


def phash(pixels: bytes, w: int, h: int, c: int) -> int:
    """The 64-bit perceptual hash (pHash): grey 32x32, 2-D DCT, the 8x8 lowest frequencies
    against their median. Near-identical pictures differ in few bits."""
    img = _to_mode(as_image(pixels, w, h, c), "L").resize((32, 32), Image.Resampling.LANCZOS)
    a = np.asarray(img, dtype=np.float64)
    low = (_DCT @ a @ _DCT.T)[:8, :8].ravel()
    bits = low > np.median(low)
    return int(np.packbits(bits).view(">u8")[0].astype(np.int64))
