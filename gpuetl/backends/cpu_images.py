"""Image work on the CPU, one image at a time, with Pillow (libjpeg-turbo, libpng, libwebp) and
simplejpeg (TurboJPEG: JPEG decoding at any n/8 DCT scale, and JPEG encoding).

Pixels between `decode` and `encode` are raw HWC uint8 bytes with their width, height and
channels (1: L, 3: RGB, 4: RGBA). Each function takes and returns plain bytes, so the steps
(steps/images.py) stay backend-neutral; a problem with one image raises BadImage with the reason
its row is quarantined with. Nothing here changes Pillow's process-wide settings: the pixel limit
is checked on the header of each image, not through `Image.MAX_IMAGE_PIXELS`.
"""

from __future__ import annotations

import io
import math
import re

import numpy as np
import simplejpeg
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
        # Pillow's own check, at twice its limit (never changed here): say what the header claims
        claimed = re.search(r"\((\d+) pixels\)", str(err))
        raise BadImage(f"over the pixel limit: the header gives {int(claimed.group(1)):,} pixels" if claimed
                       else f"over the pixel limit ({err})") from None
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
    # rounded first: 375 * (224 / 375) is 224.00000000000003, which must not ask for 225
    return max(1, math.ceil(round(w * s, 6))), max(1, math.ceil(round(h * s, 6)))


def decode(data: bytes, mode: str, orientation: int, draft_to=None, resize_to=None) -> tuple[bytes, int, int, int]:
    """Decode to raw HWC uint8 in `mode` (RGB | L | RGBA). CMYK, palette, 16-bit and alpha
    images are converted; `orientation` (1-8) is applied. `draft_to`: the size (as stored) a
    later resize needs; a JPEG is then decoded by libjpeg-turbo at the smallest DCT scale n/8
    (1/8 to 8/8) still at least that size, so a 500x375 photo for a 224 fill decodes at 5/8
    (313x235): fewer pixels to decode and to resample, slightly different ones from a full
    decode (the resize after it is the same antialiased filter). `resize_to`: (how, W, H,
    filter) of the resize step that follows, done on the decoded image before its pixels leave
    Pillow, with the size and source region of the full picture (`_resized`)."""
    scaled = _scaled_jpeg(data, mode, draft_to) if draft_to is not None else None
    img, stored = scaled if scaled is not None else _pillow_decode(data, draft_to)
    decoded = img.size
    img = _to_mode(img, mode)
    if orientation in ORIENT:
        img = img.transpose(ORIENT[orientation])
    if resize_to is not None:
        img = _resized(img, *resize_to, picture=_picture(stored, decoded, orientation))
    return img.tobytes(), img.width, img.height, CHANNELS[img.mode]


def _picture(stored: tuple[int, int], decoded: tuple[int, int], orientation: int):
    """Where the picture lies in DCT-scaled pixels, upright: ((W, H) of the full picture, upright;
    (left, top) of it in the decoded pixels; the scale n/8). None where the decoded size is the
    picture's at that scale exactly (whole pixels). libjpeg scales each 8x8 block to n x n, so a
    500-wide picture at 5/8 is 312.5 pixels, stored in 313: the last column is part picture, part
    padding. A region mapped by the decoded size (313/500) would be off by up to half a pixel;
    this mapping is exact."""
    (w, h), (dw, dh) = stored, decoded
    n = next((n for n in range(1, 9) if -(-w * n // 8) == dw and -(-h * n // 8) == dh), None)
    if n is None or (w * n % 8 == 0 and h * n % 8 == 0):
        return None
    f = n / 8
    ex, ey = dw - w * f, dh - h * f                        # the part-pixels, right and bottom as stored
    # the stored edge each orientation turns to the upright left and top (ORIENT's transposes)
    left, top = {1: (0, 0), 2: (ex, 0), 3: (ex, ey), 4: (0, ey), 5: (0, 0), 6: (ey, 0), 7: (ey, ex),
                 8: (0, ex)}.get(orientation, (0, 0))
    upright = (h, w) if orientation in (5, 6, 7, 8) else (w, h)
    return upright, (left, top), f


SCALED_COLORSPACES = ("YCbCr", "Gray", "RGB")     # CMYK and YCCK (Adobe's inverted CMYK): Pillow


def _scaled_jpeg(data: bytes, mode: str, min_size: tuple[int, int]):
    """(an RGB or L image, the stored size): a JPEG decoded by simplejpeg at the smallest n/8
    scale that is at least `min_size` (never above the stored size). None leaves the image to
    Pillow: another format or mode, a CMYK/YCCK JPEG, one over Pillow's own pixel limit (Pillow
    then refuses it as before), and whatever simplejpeg refuses (corrupt, truncated, unusual
    sampling: Pillow decodes it or gives the reason it cannot)."""
    data = memoryview(data).cast("B")        # Arrow's buffers are signed chars; simplejpeg takes unsigned
    if mode not in ("RGB", "L") or data[:3] != b"\xff\xd8\xff":      # Pillow's test for a JPEG
        return None
    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        limit = Image.MAX_IMAGE_PIXELS                                   # read, never set
        if colorspace not in SCALED_COLORSPACES or (limit and w * h > limit):
            return None
        pixels = simplejpeg.decode_jpeg(data, "RGB" if mode == "RGB" else "GRAY",
                                        min_width=min(min_size[0], w), min_height=min(min_size[1], h))
    except ValueError:           # strict: libjpeg's warnings (corrupt data) too
        return None
    return Image.fromarray(pixels if mode == "RGB" else pixels[:, :, 0]), (w, h)


def decode_jpeg_into(data, mode: str, out: np.ndarray) -> bool:
    """A JPEG decoded by TurboJPEG (simplejpeg) straight into `out` (H x W x C uint8, the size its
    row says; no intermediate copy), where that gives `decode(data, mode, 1)`'s pixels: a YCbCr
    JPEG to RGB or a greyscale one to L (the same libjpeg-turbo, the same DCT and upsampling as
    Pillow's; tests/loader/test_images.py compares). False leaves the image to `decode`: another
    format, mode or size, an Adobe or CMYK JPEG, an EXIF orientation to apply, or whatever
    simplejpeg refuses (corrupt, truncated: Pillow decides)."""
    data = memoryview(data).cast("B")
    if data[:3] != b"\xff\xd8\xff" or mode not in ("RGB", "L"):
        return False
    try:
        h, w, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if (h, w, 3 if mode == "RGB" else 1) != out.shape or colorspace != ("YCbCr" if mode == "RGB" else "Gray"):
            return False
        simplejpeg.decode_jpeg(data, "RGB" if mode == "RGB" else "GRAY", buffer=out)
    except ValueError:           # strict: libjpeg's warnings (corrupt data) too
        return False
    return True


def _pillow_decode(data: bytes, draft_to) -> tuple[Image.Image, tuple[int, int]]:
    """(Pillow's decode, the stored size); a JPEG at the smallest of 1/2, 1/4, 1/8 (Pillow's
    `draft`) still at least `draft_to`."""
    img = _open(data)
    stored = img.size
    try:
        if draft_to is not None and img.format == "JPEG":
            img.draft(None, draft_to)
        img.load()
    except Image.DecompressionBombError as err:
        raise BadImage(f"over the pixel limit ({err})") from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise BadImage(f"cannot decode the image: {err}") from None
    return img, stored


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


def _resized(img: Image.Image, how: str, tw: int, th: int, filter: str, picture=None) -> Image.Image:
    """`picture` (from `_picture`): the image is a DCT-scaled decode; the size and the region are
    the full picture's, the region mapped into the decoded pixels by the exact scale."""
    if picture is None:
        size, box = resize_geometry(*img.size, how, tw, th)
    else:
        (w, h), (left, top), f = picture
        size, box = resize_geometry(w, h, how, tw, th)
        x0, y0, x1, y1 = box or (0, 0, w, h)
        box = (left + x0 * f, top + y0 * f, left + x1 * f, top + y1 * f)
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
    """Deterministic bytes: no metadata, fixed settings. JPEG: TurboJPEG through simplejpeg
    (baseline, accurate DCT, no Huffman optimisation; 4:2:0 below quality 95, 4:4:4 from 95),
    straight from the pixels without a Pillow image."""
    if fmt == "raw":
        return bytes(pixels)
    if fmt == "jpeg":
        if c == 4:
            raise BadImage("JPEG has no alpha channel: add `convert: RGB` before encode")
        check_raw(pixels, w, h, c)
        hwc = np.frombuffer(pixels, np.uint8).reshape(h, w, c)
        if c == 1:
            return simplejpeg.encode_jpeg(hwc, quality, "GRAY", "Gray")
        return simplejpeg.encode_jpeg(hwc, quality, "RGB", "420" if quality < 95 else "444")
    img = as_image(pixels, w, h, c)
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, "PNG", compress_level=6)
    else:
        img.save(buf, "WEBP", quality=quality, method=4)
    return buf.getvalue()


_N = np.arange(32)
DCT = np.cos(np.pi * (2 * _N[None, :] + 1) * _N[:, None] / 64)     # DCT-II basis, rows = frequency


def phash(pixels: bytes, w: int, h: int, c: int) -> int:
    """The 64-bit perceptual hash (pHash): grey 32x32, 2-D DCT, the 8x8 lowest frequencies
    against their median. Near-identical pictures differ in few bits."""
    img = _to_mode(as_image(pixels, w, h, c), "L").resize((32, 32), Image.Resampling.LANCZOS)
    a = np.asarray(img, dtype=np.float64)
    low = (DCT @ a @ DCT.T)[:8, :8].ravel()
    bits = low > np.median(low)
    return int(np.packbits(bits).view(">u8")[0].astype(np.int64))
