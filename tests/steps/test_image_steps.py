"""Image steps: decode (unusual images, EXIF orientation, DCT scaling), resize, center_crop,
convert, encode, phash; each run through a pipeline, with the accounting identity."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from gpuetl.backends import cpu_images
from gpuetl.samples import photo_like
from imagedata import balanced, image_bytes, jpeg_bytes, pixels, quarantine_of, rows_of, run_images, write


def _one(tmp_path, name: str, data: bytes, steps, **kwargs) -> dict:
    write(tmp_path / "photos" / "x" / name, data)
    result = run_images(tmp_path, steps=steps, **kwargs)
    assert balanced(result) and result.counts["rows_out"] == 1, quarantine_of(tmp_path / "out")
    (row,) = rows_of(tmp_path / "out")
    return row


def _marked(w=40, h=24) -> Image.Image:
    """Asymmetric: a red block top-left, a blue one bottom-right, so every turn shows."""
    a = np.full((h, w, 3), 128, np.uint8)
    a[: h // 3, : w // 3] = (255, 0, 0)
    a[-h // 4:, -w // 5:] = (0, 0, 255)
    return Image.fromarray(a)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_applied(tmp_path, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = image_bytes(_marked(), "JPEG", quality=95, exif=exif.tobytes())
    row = _one(tmp_path, "o.jpg", data, [{"decode": {}}])
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert row["format"] == "raw" and np.array_equal(pixels(row), expected)
    assert (row["width"], row["height"]) == ((24, 40) if orientation >= 5 else (40, 24))


def test_exif_transpose_off_keeps_stored_pixels(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6
    data = image_bytes(_marked(), "JPEG", quality=95, exif=exif.tobytes())
    row = _one(tmp_path, "o.jpg", data, [{"decode": {}}], source={"exif_transpose": False})
    assert np.array_equal(pixels(row), np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


def _sixteen_bit() -> bytes:
    return image_bytes(Image.fromarray(np.full((8, 10), 0x8040, np.uint16)), "PNG")


UNUSUAL = {
    "cmyk.jpg": lambda: image_bytes(Image.new("CMYK", (10, 8), (0, 255, 255, 0)), "JPEG", quality=95),
    "grey.jpg": lambda: image_bytes(Image.new("L", (10, 8), 77), "JPEG", quality=95),
    "palette.png": lambda: image_bytes(Image.new("RGB", (10, 8), (10, 200, 30)).convert("P"), "PNG"),
    "alpha.png": lambda: image_bytes(Image.new("RGBA", (10, 8), (255, 0, 0, 0)), "PNG"),
    "grey-alpha.png": lambda: image_bytes(Image.new("LA", (10, 8), (50, 255)), "PNG"),
    "sixteen.png": _sixteen_bit,
    "pic.webp": lambda: image_bytes(Image.new("RGB", (10, 8), (0, 0, 200)), "WEBP", lossless=True),
}
EXPECTED = {"cmyk.jpg": (255, 0, 0), "grey.jpg": (77, 77, 77), "palette.png": (10, 200, 30),
            "alpha.png": (255, 255, 255), "grey-alpha.png": (50, 50, 50), "sixteen.png": (128, 128, 128),
            "pic.webp": (0, 0, 200)}


@pytest.mark.parametrize("name", sorted(UNUSUAL))
def test_unusual_images_are_converted_not_rejected(tmp_path, name):
    row = _one(tmp_path, name, UNUSUAL[name](), [{"decode": {"mode": "RGB"}}])
    px = pixels(row)
    assert px.shape == (8, 10, 3)
    assert np.abs(px.reshape(-1, 3).mean(axis=0) - EXPECTED[name]).max() <= 3, px[0, 0]


@pytest.mark.parametrize("mode,size,expected", [("fill", [20, 20], (20, 20)), ("fit", [20, 20], (20, 15)),
                                                ("stretch", [20, 10], (20, 10))])
def test_resize_modes(tmp_path, mode, size, expected):
    row = _one(tmp_path, "a.jpg", jpeg_bytes(64, 48), [{"decode": {}}, {"resize": {"size": size, "mode": mode}}])
    assert (row["width"], row["height"]) == expected and pixels(row).shape == (expected[1], expected[0], 3)


def test_fill_is_scale_then_centre_crop(tmp_path):
    """fill on a wide picture: what comes out is the middle, scaled (the edges are cut off)."""
    a = np.zeros((20, 60, 3), np.uint8)
    a[:, 20:40] = 255                                      # a white middle third
    row = _one(tmp_path, "a.png", image_bytes(Image.fromarray(a), "PNG"),
               [{"decode": {}}, {"resize": {"size": 10, "mode": "fill", "filter": "box"}}])
    assert pixels(row).min() == 255


@pytest.mark.parametrize("w,h,how,target,size,box", [
    (500, 375, "fill", (224, 224), (224, 224), (62.5, 0.0, 437.5, 375.0)),     # half pixels kept
    (375, 500, "fill", (224, 224), (224, 224), (0.0, 62.5, 375.0, 437.5)),
    (64, 48, "fill", (20, 10), (20, 10), (0.0, 8.0, 64.0, 40.0)),
    (64, 48, "fit", (20, 20), (20, 15), None),
    (64, 48, "stretch", (20, 10), (20, 10), None),
])
def test_resize_geometry_is_the_region_both_backends_resample(w, h, how, target, size, box):
    """One function gives the size and the exact source region: the CPU hands it to Pillow as
    the box, the GPU to CV-CUDA as the ROI (fractions kept, not rounded to whole pixels)."""
    got_size, got_box = cpu_images.resize_geometry(w, h, how, *target)
    assert got_size == size and (got_box == box if box is None else got_box == pytest.approx(box, abs=1e-9))
    box = got_box
    px = np.random.default_rng(0).integers(0, 256, (h, w, 3), np.uint8)
    want = Image.fromarray(px).resize(size, Image.Resampling.BICUBIC, box=box)
    assert cpu_images.resize(px.tobytes(), w, h, 3, how, *target, "bicubic") == (want.tobytes(), *size, 3)


def test_center_crop_convert_and_raw_encode(tmp_path):
    steps = [{"decode": {}}, {"center_crop": 16}, {"convert": "L"}, {"encode": "raw"}]
    row = _one(tmp_path, "a.jpg", jpeg_bytes(64, 48), steps)
    assert (row["width"], row["height"], row["channels"], row["format"]) == (16, 16, 1, "raw")
    assert len(row["image"]) == 16 * 16


@pytest.mark.parametrize("fmt,magic", [("jpeg", b"\xff\xd8"), ("png", b"\x89PNG"), ("webp", b"RIFF")])
def test_encode_formats(tmp_path, fmt, magic):
    row = _one(tmp_path, "a.jpg", jpeg_bytes(64, 48), [{"decode": {}}, {"encode": {"format": fmt, "quality": 80}}])
    assert row["image"].startswith(magic) and row["format"] == fmt
    assert Image.open(io.BytesIO(row["image"])).size == (64, 48)


def test_jpeg_of_rgba_is_quarantined_with_a_hint(tmp_path):
    write(tmp_path / "photos" / "x" / "a.png", image_bytes(Image.new("RGBA", (8, 8)), "PNG"))
    result = run_images(tmp_path, steps=[{"decode": {"mode": "RGBA"}}, {"encode": "jpeg"}], allow_empty_output=True)
    assert balanced(result) and result.counts["quarantined"] == 1
    (bad,) = quarantine_of(tmp_path / "out")
    assert "convert: RGB" in bad["_reason"] and bad["_stage"].startswith("2")
    assert len(bad["_raw"]) == 8 * 8 * 4          # the pixels as they reached encode, as bytes


def test_draft_decoding_matches_full_decoding_closely():
    """The DCT-scaled decode of a large JPEG, resized, stays close to the full decode resized."""
    data = jpeg_bytes(800, 600, seed=5)
    target = ("fill", 100, 100)
    small = cpu_images.decode(data, "RGB", 1, cpu_images.draft_size(800, 600, 1, target))
    full = cpu_images.decode(data, "RGB", 1)
    assert small[1] < 800 and small[1] >= 134            # decoded at 1/4 (200x150) or 1/2, never below the need
    a = np.frombuffer(cpu_images.resize(*small, *target, "bicubic")[0], np.uint8).astype(float)
    b = np.frombuffer(cpu_images.resize(*full, *target, "bicubic")[0], np.uint8).astype(float)
    psnr = 10 * np.log10(255 ** 2 / np.mean((a - b) ** 2))
    assert psnr >= 30 and np.abs(a - b).mean() <= 3


def test_phash_near_copies_are_close_and_different_pictures_far():
    a = cpu_images.decode(jpeg_bytes(64, 48, seed=1), "RGB", 1)
    b = cpu_images.decode(jpeg_bytes(64, 48, seed=1, quality=40), "RGB", 1)
    c = cpu_images.decode(jpeg_bytes(64, 48, seed=2), "RGB", 1)
    bits = lambda x, y: bin((cpu_images.phash(*x) ^ cpu_images.phash(*y)) & (2**64 - 1)).count("1")  # noqa: E731
    assert bits(a, b) <= 6 < bits(a, c)


def test_resize_before_decode_is_a_plan_error(tmp_path):
    from gpuetl.errors import SpecError

    write(tmp_path / "photos" / "x" / "a.jpg", jpeg_bytes())
    with pytest.raises(SpecError, match="put decode before"):
        run_images(tmp_path, steps=[{"encode": "png"}])


def _oriented_jpeg(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return image_bytes(_marked(300, 200), "JPEG", quality=90, exif=exif.tobytes())


FUSE_INPUTS = {"photo.jpg": lambda: jpeg_bytes(300, 200, seed=3), "turned.jpg": lambda: _oriented_jpeg(6),
               "alpha.png": UNUSUAL["alpha.png"], "grey.jpg": UNUSUAL["grey.jpg"]}


@pytest.mark.parametrize("name", sorted(FUSE_INPUTS))
@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
@pytest.mark.parametrize("how,size", [("fill", (40, 30)), ("fit", (40, 40)), ("stretch", (33, 17))])
def test_resize_while_decoding_gives_the_same_pixels(name, mode, how, size):
    """decode with the following resize folded in = decode, then resize on its pixels (where the
    DCT scale gives whole pixels); the resize step then passes pixels already at the size
    through unchanged."""
    data = FUSE_INPUTS[name]()
    _, w, h, orientation = cpu_images.probe(data, 10**8)
    draft = cpu_images.draft_size(w, h, orientation, (how, *size))
    resize = (how, *size, "bicubic")
    decoded = cpu_images.decode(data, mode, orientation, draft)
    apart = cpu_images.resize(*decoded, *resize)
    folded = cpu_images.decode(data, mode, orientation, draft, resize)
    stored = decoded[1:3] if orientation < 5 else decoded[2:0:-1]
    if cpu_images._picture((w, h), stored, orientation) is None:
        assert bytes(folded[0]) == bytes(apart[0]) and folded[1:] == apart[1:]
    else:        # decoded to part-pixels (38x25 for 37.5x25): folded maps the region exactly, apart cannot
        full = cpu_images.resize(*cpu_images.decode(data, mode, orientation), *resize)
        assert folded[1:] == full[1:] and _psnr(folded[0], full[0]) >= _psnr(apart[0], full[0]) - 0.5
    again = cpu_images.resize(*folded, *resize)
    assert again[0] is folded[0] and again[1:] == folded[1:]


def test_decode_folds_in_only_a_resize_right_after_it():
    from gpuetl.steps.images import CenterCrop, Convert, Decode, Resize

    decode, resize = Decode.from_raw({}), Resize.from_raw({"size": 32, "filter": "lanczos"})
    assert decode.look_ahead([resize]).resize_to == ("fit", 32, 32, "lanczos")
    assert decode.look_ahead([Convert.from_raw("L"), resize]).resize_to is None
    assert decode.look_ahead([CenterCrop.from_raw(8), resize]).resize_to is None
    assert decode.look_ahead([resize]).target == ("fit", 32, 32) and decode.resize_to is None


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_pipeline_with_resize_folded_in_writes_the_same_bytes(tmp_path, mode):
    """decode, resize (folded) against decode, convert (a no-op here that keeps them apart), resize."""
    for i, make in enumerate(FUSE_INPUTS.values()):
        write(tmp_path / "photos" / "x" / f"{i}.png", make())    # the suffix is not what decodes it
    tail = [{"resize": {"size": [40, 30], "mode": "fill"}}, {"encode": "png"}]
    rows = {}
    for label, steps in (("folded", [{"decode": {"mode": mode}}, *tail]),
                         ("apart", [{"decode": {"mode": mode}}, {"convert": mode}, *tail])):
        result = run_images(tmp_path, steps=steps, sink=label)
        assert balanced(result) and result.counts["rows_out"] == len(FUSE_INPUTS)
        rows[label] = sorted((r["key"], r["image"]) for r in rows_of(tmp_path / label))
    assert rows["folded"] == rows["apart"]


# -- JPEG decoding at libjpeg-turbo's n/8 DCT scales (simplejpeg) -----------------------------

def _psnr(a, b) -> float:
    a, b = np.frombuffer(a, np.uint8).astype(float), np.frombuffer(b, np.uint8).astype(float)
    mse = np.mean((a - b) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255 ** 2 / mse))


def _mad(a, b) -> float:
    return float(np.abs(np.frombuffer(a, np.uint8).astype(int) - np.frombuffer(b, np.uint8).astype(int)).mean())


def _full_then_resize(data: bytes, mode: str, how: str, size) -> tuple:
    """The reference: Pillow's full-size decode, upright, then the resize on those pixels."""
    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert(mode)
    return cpu_images.resize(img.tobytes(), *img.size, len(mode), how, *size, "bicubic")


@pytest.fixture
def scaled_decodes(monkeypatch):
    """The (height, width) of every simplejpeg decode, to see which path decoded."""
    import simplejpeg

    shapes, real = [], simplejpeg.decode_jpeg

    def decode_jpeg(*args, **kwargs):
        pixels = real(*args, **kwargs)
        shapes.append(pixels.shape[:2])
        return pixels
    monkeypatch.setattr(simplejpeg, "decode_jpeg", decode_jpeg)
    return shapes


SCALED = [  # (w, h, how, size, the n/8 decode expected): Pillow's draft (1/2, 1/4, 1/8) would decode all at full size
    (200, 150, "fill", (90, 90), (125, 94)),           # 5/8
    (320, 250, "fill", (100, 100), (160, 125)),        # 4/8
    (160, 120, "fit", (60, 60), (60, 45)),             # 3/8
    (300, 210, "stretch", (64, 48), (75, 53)),         # 2/8, a part-pixel row
    (500, 375, "fill", (224, 224), (313, 235)),        # ImageNet size: 5/8
]


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("w,h,how,size,decoded", SCALED)
def test_scaled_jpeg_decode_is_close_to_a_full_decode_then_resize(w, h, how, size, decoded, mode, scaled_decodes,
                                                                   capsys):
    """decode + resize at the smallest n/8 scale against Pillow's full decode + the same resize:
    the same size, PSNR >= 35 dB and mean absolute difference <= 3 on noisy photo-like content
    (the noise is where a DCT-domain and a bicubic downscale differ most; the fit case decodes
    right at the target size, so the DCT scaling does all of the downscale)."""
    data = jpeg_bytes(w, h, seed=w)
    draft = cpu_images.draft_size(w, h, 1, (how, *size))
    got = cpu_images.decode(data, mode, 1, draft, (how, *size, "bicubic"))
    want = _full_then_resize(data, mode, how, size)
    assert scaled_decodes == [decoded[::-1]]
    assert got[1:] == want[1:]
    psnr, mad = _psnr(got[0], want[0]), _mad(got[0], want[0])
    with capsys.disabled():
        print(f"\n{w}x{h} {how} {size} {mode}: decoded at {decoded}, vs full decode PSNR {psnr:.1f} dB, MAD {mad:.2f}")
    assert psnr >= 35 and mad <= 3


@pytest.mark.parametrize("orientation", range(1, 9))
def test_scaled_decode_applies_exif_orientation_and_maps_the_region_exactly(orientation, scaled_decodes):
    """300x210 decodes at 2/8 (75x52.5: a part-pixel row) or 3/8 (112.5x78.75) when turned: every
    orientation puts the part-pixels on another edge, and a region mapped half a pixel off shows
    as a PSNR drop of 4-14 dB against the full decode, turned the same way."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = image_bytes(Image.open(io.BytesIO(jpeg_bytes(300, 210, seed=9))), "JPEG", quality=90, exif=exif.tobytes())
    _, w, h, turn = cpu_images.probe(data, 10**8)
    assert turn == orientation
    got = cpu_images.decode(data, "RGB", turn, cpu_images.draft_size(w, h, turn, ("fill", 64, 48)),
                            ("fill", 64, 48, "bicubic"))
    want = _full_then_resize(data, "RGB", "fill", (64, 48))
    assert scaled_decodes == [(53, 75) if orientation < 5 else (79, 113)]
    assert got[1:] == want[1:] == (64, 48, 3)
    assert _psnr(got[0], want[0]) >= 38 and _mad(got[0], want[0]) <= 2


def test_marked_corners_stay_put_in_every_orientation():
    """The red and blue corners land where Pillow's exif_transpose puts them (a wrong turn is off by ~255)."""
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        data = image_bytes(_marked(300, 200), "JPEG", quality=90, exif=exif.tobytes())
        _, w, h, turn = cpu_images.probe(data, 10**8)
        px, tw, th, _ = cpu_images.decode(data, "RGB", turn, cpu_images.draft_size(w, h, turn, ("fit", 60, 60)),
                                          ("fit", 60, 60, "bicubic"))
        want = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB").resize((tw, th))
        a = np.frombuffer(px, np.uint8).reshape(th, tw, 3)
        assert np.abs(a.astype(int) - np.asarray(want, int)).max() <= 40, orientation     # corners in place


def _extraneous_bytes(data: bytes) -> bytes:
    """Three stray bytes before the start-of-scan marker: libjpeg warns (simplejpeg, strict,
    refuses), Pillow decodes."""
    at = data.index(b"\xff\xda")
    return data[:at] + b"\x00\x01\x02" + data[at:]


def test_jpegs_simplejpeg_refuses_are_decoded_or_refused_by_pillow(scaled_decodes):
    target, resize = (125, 94), ("fill", 90, 90, "bicubic")
    clean = jpeg_bytes(200, 150, seed=4)
    reference = cpu_images.decode(clean, "RGB", 1, target, resize)
    assert scaled_decodes == [(94, 125)]
    stray = cpu_images.decode(_extraneous_bytes(clean), "RGB", 1, target, resize)      # Pillow: full decode
    assert stray[1:] == (90, 90, 3) and _psnr(stray[0], reference[0]) >= 35
    cmyk = image_bytes(Image.new("CMYK", (200, 150), (0, 255, 255, 0)), "JPEG", quality=95)   # left to Pillow
    px, *shape = cpu_images.decode(cmyk, "RGB", 1, target, resize)
    assert shape == [90, 90, 3] and np.abs(np.frombuffer(px, np.uint8).reshape(-1, 3).mean(0) - (255, 0, 0)).max() <= 3
    with pytest.raises(cpu_images.BadImage, match="cannot decode the image"):     # truncated: Pillow's reason
        cpu_images.decode(clean[: len(clean) // 2], "RGB", 1, target, resize)
    assert scaled_decodes == [(94, 125)]                  # simplejpeg refused all three


def test_a_jpeg_simplejpeg_fails_on_gets_pillows_result(monkeypatch):
    """Whatever simplejpeg raises on, Pillow decodes (with its draft) or gives the reason."""
    import simplejpeg

    data = jpeg_bytes(400, 300, seed=2)
    target, resize = cpu_images.draft_size(400, 300, 1, ("fill", 64, 64)), ("fill", 64, 64, "bicubic")
    scaled = cpu_images.decode(data, "RGB", 1, target, resize)

    def refuse(*args, **kwargs):
        raise ValueError("refused")
    monkeypatch.setattr(simplejpeg, "decode_jpeg", refuse)
    fallback = cpu_images.decode(data, "RGB", 1, target, resize)
    assert fallback[1:] == scaled[1:] and _psnr(fallback[0], scaled[0]) >= 35


def test_jpeg_encode_is_turbojpeg_420_below_95_and_444_from_95():
    rgb = np.asarray(photo_like(np.random.default_rng(1), 48, 32).convert("RGB"))
    for quality, luma in ((90, (1, 2, 2, 0)), (95, (1, 1, 1, 0))):          # 4:2:0, 4:4:4
        layers = [luma, (2, 1, 1, 1), (3, 1, 1, 1)]
        out = cpu_images.encode(rgb.tobytes(), 48, 32, 3, "jpeg", quality)
        img = Image.open(io.BytesIO(out))
        assert img.layer == layers and img.size == (48, 32) and set(img.info) <= {"jfif", "jfif_version", "jfif_unit",
                                                                                  "jfif_density"}
        by_pillow = Image.open(io.BytesIO(image_bytes(Image.fromarray(rgb), "JPEG", quality=quality,
                                                      subsampling=2 if quality < 95 else 0)))
        assert img.quantization == by_pillow.quantization and img.layer == by_pillow.layer   # the same settings
        error = _psnr(np.asarray(img.convert("RGB")).tobytes(), rgb.tobytes())
        assert error >= _psnr(np.asarray(by_pillow).tobytes(), rgb.tobytes()) - 0.5          # the same quality
        assert out == cpu_images.encode(memoryview(rgb.tobytes()), 48, 32, 3, "jpeg", quality)   # deterministic
    grey = cpu_images.encode(rgb[:, :, 0].tobytes(), 48, 32, 1, "jpeg", 90)
    assert Image.open(io.BytesIO(grey)).mode == "L"


def test_image_steps_call_the_backends_typed_methods_and_import_no_backend():
    """Each image step hands its parameters to one typed method of the backend (no step name
    passed as a string, no None meaning "do it yourself"), and steps/images.py imports no
    backend module (an import inside a function counts)."""
    import ast
    import inspect

    import pandas as pd

    from gpuetl.backends.base import Backend, Images, facet_members
    from gpuetl.backends.cpu import CpuBackend
    from gpuetl.steps import images

    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(images))):
        if isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    assert not [m for m in imported if "backends" in m.split(".")], sorted(imported)
    methods = ["decode_images", "resize_images", "center_crop_images", "convert_images", "encode_images",
               "phash_images"]
    assert set(methods) <= set(facet_members(Images)) and not hasattr(Backend, "image_step")

    calls = []

    class Recording(CpuBackend):
        pass

    for name in methods:
        setattr(Recording, name, lambda self, df, *args, _name=name, **kwargs: calls.append((_name, args, kwargs))
                or (df, None, None))
    df = pd.DataFrame({"image": [b"x"]})
    steps = [images.Decode.from_raw({"mode": "L"}), images.Resize.from_raw({"size": [8, 6], "mode": "fill"}),
             images.CenterCrop.from_raw(4), images.Convert.from_raw("RGB"), images.Encode.from_raw("png"),
             images.Phash.from_raw({"column": "h"})]
    for step in steps:
        assert step.quarantine(df, Recording()) == (df, None, None)
    assert calls == [("decode_images", ("L",), {"resize_to": None, "draft_for": None}),
                     ("resize_images", ("fill", 8, 6, "bicubic"), {}), ("center_crop_images", (4, 4), {}),
                     ("convert_images", ("RGB",), {}), ("encode_images", ("png", 90), {}),
                     ("phash_images", ("h",), {})]
