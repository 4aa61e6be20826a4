"""The GPU image path (backends/gpu_images.py: nvImageCodec, CV-CUDA) against the CPU's (Pillow) on
a GPU: `pytest -m gpu`; skipped cleanly elsewhere (conftest: no GPU; here: the libraries missing).

- parity after `resize`: PSNR >= 35 dB and mean absolute difference <= 2 per image, kernels and
  whole pipelines; both printed, with how many rows a phash dedupe keeps differently;
- determinism: byte-identical shards for the same inputs, run twice and at another blocksize;
- bad and unusual images: the same quarantine rows and reasons as the CPU backend;
- the fallback counters: zero where the device path is expected, exactly the expected reasons
  where Pillow must decide (a truncated JPEG, CMYK, PNG)."""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
from PIL import Image

for _module in ("cupy", "cvcuda", "nvidia.nvimgcodec"):
    try:                       # without a GPU, cvcuda's import fails on libcuda.so.1
        __import__(_module)
    except Exception as err:   # noqa: BLE001 - any failure to load means: not here
        pytest.skip(f"needs {_module} on a GPU machine ({type(err).__name__}: {err})", allow_module_level=True)

from gpuetl.api import Pipeline  # noqa: E402
from gpuetl.backends import cpu_images, get_backend, gpu_images  # noqa: E402
from gpuetl.backends.gpu_tallies import fallback_counts, reset_tallies  # noqa: E402
from imagedata import image_bytes, image_spec, jpeg_bytes, pixels, quarantine_of, rows_of, write  # noqa: E402

pytestmark = pytest.mark.gpu
BOUNDS = {"psnr_db": 35.0, "mad": 2.0}


def _gpu():
    backend = get_backend("gpu")
    backend.images_on_gpu = True
    return backend


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255 ** 2 / mse))


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(int) - b.astype(int)).mean())


def _compare(pairs, what: str, capsys) -> None:
    """Print the worst PSNR and MAD over (cpu, gpu) pixel pairs, then hold them to the bounds."""
    psnrs = [_psnr(a, b) for a, b in pairs]
    mads = [_mad(a, b) for a, b in pairs]
    with capsys.disabled():
        print(f"\n[images parity] {what}: {len(pairs)} images, PSNR min {min(psnrs):.2f} dB "
              f"(mean {np.mean(psnrs):.2f}), MAD max {max(mads):.3f} (mean {np.mean(mads):.3f})")
    assert min(psnrs) >= BOUNDS["psnr_db"], f"{what}: PSNR {min(psnrs):.2f} dB below {BOUNDS['psnr_db']}"
    assert max(mads) <= BOUNDS["mad"], f"{what}: mean absolute difference {max(mads):.3f} above {BOUNDS['mad']}"


def _exif_jpeg(orientation: int, w=120, h=80, seed=0) -> bytes:
    from gpuetl.samples import photo_like

    exif = Image.Exif()
    exif[cpu_images.EXIF_ORIENTATION] = orientation
    buf = io.BytesIO()
    photo_like(np.random.default_rng(seed), w, h).save(buf, "JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


@pytest.fixture
def on_device():
    """Zero the tallies; after the test, nothing was handed to Pillow."""
    reset_tallies()
    yield
    assert fallback_counts() == {}, f"the device path fell back to the host: {fallback_counts()}"


# -- kernels --------------------------------------------------------------------------------------

@pytest.mark.parametrize("how, filter", [("fill", "bicubic"), ("fit", "bicubic"), ("stretch", "bilinear"),
                                         ("fill", "lanczos")])
def test_decode_and_resize_kernels_agree_with_pillow(how, filter, on_device, capsys):
    images = [jpeg_bytes(500, 375, seed=i) for i in range(16)] + [jpeg_bytes(1024, 768, seed=100 + i) for i in range(4)]
    target = (how, 224, 224)
    cpu = [cpu_images.resize(*cpu_images.decode(d, "RGB", 1), *target, filter) for d in images]
    decoded = gpu_images.decode_many([(d, "RGB", 1, None) for d in images])
    assert not [r for r in decoded if isinstance(r, Exception)]
    for d, (px, w, h, c) in zip(images, decoded):                     # full-size decode alone
        assert (w, h, c) == cpu_images.decode(d, "RGB", 1)[1:]
    separate = gpu_images.resize_many(decoded, *target, filter)
    fused = gpu_images.decode_many([(d, "RGB", 1, None) for d in images], (*target, filter))
    for name, got in (("resize_many", separate), ("decode_many fused", fused)):
        assert [g[1:] for g in got] == [c[1:] for c in cpu], name
        _compare([(np.frombuffer(c[0], np.uint8), np.frombuffer(g[0], np.uint8)) for c, g in zip(cpu, got)],
                 f"kernels {how} {filter} ({name})", capsys)


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA"])
def test_modes_and_exif_orientations_as_on_the_cpu(mode, on_device, capsys):
    images = [(_exif_jpeg(o, seed=o), o) for o in range(1, 9)]
    images.append((image_bytes(Image.open(io.BytesIO(jpeg_bytes(90, 60))).convert("L"), "JPEG", quality=92), 1))
    gpu = gpu_images.decode_many([(d, mode, o, None) for d, o in images])
    pairs = []
    for (d, o), g in zip(images, gpu):
        c = cpu_images.decode(d, mode, o)
        assert g[1:] == c[1:], f"orientation {o}: {g[1:]} != {c[1:]}"
        pairs.append((np.frombuffer(c[0], np.uint8), np.frombuffer(g[0], np.uint8)))
    _compare(pairs, f"decode {mode}, EXIF orientations 1-8 and a grey JPEG", capsys)


def test_jpeg_encode_follows_the_cpu_settings(on_device):
    from PIL import JpegImagePlugin

    rgb = cpu_images.decode(jpeg_bytes(224, 224, seed=3), "RGB", 1)
    grey = cpu_images.convert(*rgb, "L")
    rgba = cpu_images.decode(jpeg_bytes(224, 224, seed=3), "RGBA", 1)
    q90, grey90, alpha = gpu_images.encode_many([rgb, grey, rgba], "jpeg", 90)
    (q95,) = gpu_images.encode_many([rgb], "jpeg", 95)
    assert isinstance(alpha, cpu_images.BadImage) and "alpha" in str(alpha)
    for data, source, sampling in ((q90, rgb, 2), (q95, rgb, 0), (grey90, grey, -1)):
        img = Image.open(io.BytesIO(data))
        assert img.format == "JPEG" and img.size == (224, 224) and img.mode == ("L" if source is grey else "RGB")
        assert JpegImagePlugin.get_sampling(img) == sampling             # 4:2:0 below q95, 4:4:4 from it
        assert _psnr(np.asarray(img).ravel(), np.frombuffer(source[0], np.uint8)) > 30


def test_garbage_reaching_decode_is_a_bad_image_with_pillows_reason():
    reset_tallies()
    data = jpeg_bytes(64, 48)
    truncated, text = data[: len(data) // 2], b"not an image at all"
    out = gpu_images.decode_many([(truncated, "RGB", 1, None), (text, "RGB", 1, None)])
    for got, item in zip(out, (truncated, text)):
        assert isinstance(got, cpu_images.BadImage)
        with pytest.raises(cpu_images.BadImage) as cpu:
            cpu_images.decode(item, "RGB", 1)
        assert str(got) == str(cpu.value)
    assert fallback_counts() == {gpu_images.HOST_UNFINISHED: 1, gpu_images.HOST_FORMAT: 1}


# -- pipelines ------------------------------------------------------------------------------------

def _parity_set(root):
    """ImageNet-sized and large photos (the CPU decodes them at n/8 scales unless `draft: false`),
    EXIF-rotated ones, exact copies and re-encoded near-copies (for the phash dedupe)."""
    for i in range(24):
        write(root / "photos" / ("a", "b", "c")[i % 3] / f"{i:03d}.jpg", jpeg_bytes(500, 375, seed=i))
    for i in range(6):
        write(root / "photos" / "large" / f"{i:03d}.jpg", jpeg_bytes(1024, 768, seed=50 + i))
    for o in (3, 6, 8):
        write(root / "photos" / "rotated" / f"o{o}.jpg", _exif_jpeg(o, 500, 375, seed=60 + o))
    (root / "photos" / "copies").mkdir()
    for i in range(4):
        shutil.copy(root / "photos" / "a" / f"{3 * i:03d}.jpg", root / "photos" / "copies" / f"{i}.jpg")
        again = Image.open(root / "photos" / "b" / f"{3 * i + 1:03d}.jpg")
        write(root / "photos" / "near" / f"{i}.jpg", image_bytes(again, "JPEG", quality=70))


def _run(tmp_path, backend, steps, sink, **extra):
    spec = image_spec(steps=steps, sink=sink, **extra)
    return Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync", report=False)


def test_pipeline_parity_and_phash_dedupe(tmp_path, capsys):
    _parity_set(tmp_path)
    steps = [{"decode": {"mode": "RGB"}}, {"resize": {"size": [224, 224], "mode": "fill", "filter": "bicubic"}},
             {"phash": {}}]
    # The GPU decodes at full size; the CPU by default at libjpeg-turbo's n/8 scales (`draft`), whose
    # pixels differ a little more. The bounds hold like with like (the CPU at full size); the CPU's
    # default is reported beside it and held to the PSNR bound.
    full = [{"decode": {"mode": "RGB", "draft": False}}, *steps[1:]]
    cpu = _run(tmp_path, "cpu", full, "out-cpu")
    cpu_draft = _run(tmp_path, "cpu", steps, "out-cpu-draft")
    gpu = _run(tmp_path, _gpu(), steps, "out-gpu")
    assert gpu.manifest["fallbacks"] == {}, gpu.manifest["fallbacks"]
    assert gpu.counts == cpu.counts == cpu_draft.counts
    c_rows, g_rows = rows_of(tmp_path / "out-cpu"), rows_of(tmp_path / "out-gpu")
    assert [r["key"] for r in g_rows] == [r["key"] for r in c_rows]
    assert [(r["width"], r["height"], r["channels"], r["label"], r["label_id"]) for r in g_rows] == \
        [(r["width"], r["height"], r["channels"], r["label"], r["label_id"]) for r in c_rows]
    _compare([(pixels(c), pixels(g)) for c, g in zip(c_rows, g_rows)], "pipeline decode -> resize fill 224", capsys)
    d_rows = rows_of(tmp_path / "out-cpu-draft")
    scaled = [_psnr(pixels(c), pixels(g)) for c, g in zip(d_rows, g_rows)]
    with capsys.disabled():
        print(f"[images parity] CPU decoding at n/8 scales vs GPU: PSNR min {min(scaled):.2f} dB, MAD max "
              f"{max(_mad(pixels(c), pixels(g)) for c, g in zip(d_rows, g_rows)):.3f}")
    assert min(scaled) >= BOUNDS["psnr_db"]

    dedupe = [*steps, {"dedupe": {"on": ["phash"]}}]
    kept = {}
    for name, backend in (("cpu", "cpu"), ("gpu", _gpu())):
        result = _run(tmp_path, backend, dedupe, f"dedupe-{name}")
        kept[name] = {r["key"] for r in rows_of(tmp_path / f"dedupe-{name}")}
        assert result.counts["deduplicated"] >= 4, result.counts           # the exact copies at least
    phash_differs = sum(c["phash"] != g["phash"] for c, g in zip(c_rows, g_rows))
    with capsys.disabled():
        print(f"[images parity] phash differs on {phash_differs}/{len(c_rows)} rows; a phash dedupe keeps "
              f"{len(kept['cpu'] ^ kept['gpu'])} rows differently (CPU keeps {len(kept['cpu'])}, "
              f"GPU {len(kept['gpu'])})")
    assert kept["cpu"] & kept["gpu"]


def test_gpu_shards_are_byte_identical_run_twice_and_at_another_blocksize(tmp_path):
    _parity_set(tmp_path)
    steps = [{"decode": {}}, {"resize": {"size": [96, 96], "mode": "fill"}}, {"encode": {"format": "jpeg", "quality": 90}}]
    layout = {"shard": {"count": 2, "shuffle": True, "seed": 0, "splits": {"train": 0.8, "val": 0.2}}}
    runs = [_run(tmp_path, _gpu(), steps, f"out-{i}", source={"blocksize": size}, **layout)
            for i, size in enumerate(["256KiB", "256KiB", "4MiB"])]
    digests = [[(s["path"], s["sha256"]) for s in r.shards] for r in runs]
    assert all(r.manifest["fallbacks"] == {} for r in runs), [r.manifest["fallbacks"] for r in runs]
    assert digests[0] == digests[1], "the same run twice wrote different bytes"
    assert digests[0] == digests[2], "another blocksize (other decode batches) wrote different bytes"


def test_bad_and_unusual_images_quarantined_with_the_cpu_reasons(tmp_path):
    folder = tmp_path / "photos" / "x"
    good = jpeg_bytes(120, 90, seed=1)
    write(folder / "good.jpg", good)
    write(folder / "progressive.jpg", jpeg_bytes(120, 90, seed=2, progressive=True))
    write(folder / "empty.jpg", b"")
    write(folder / "truncated.jpg", good[: len(good) // 2])
    write(folder / "text.jpg", b"just some text, not an image\n")
    write(folder / "cmyk.jpg", image_bytes(Image.open(io.BytesIO(good)).convert("CMYK"), "JPEG"))
    write(folder / "alpha.png", image_bytes(Image.open(io.BytesIO(good)).convert("RGBA"), "PNG"))
    write(folder / "deep.png", image_bytes(Image.fromarray(np.full((30, 40), 40000, np.uint16)), "PNG"))
    steps = [{"decode": {}}, {"resize": {"size": [64, 64], "mode": "fit"}}, {"encode": {"format": "jpeg"}}]
    cpu = _run(tmp_path, "cpu", steps, "out-cpu")
    gpu = _run(tmp_path, _gpu(), steps, "out-gpu")
    assert gpu.counts == cpu.counts and gpu.counts["quarantined"] == 3

    def reasons(out):
        return sorted((q["_file"], q["_stage"], q["_reason"], q["_raw"]) for q in quarantine_of(out))

    assert reasons(tmp_path / "out-gpu") == reasons(tmp_path / "out-cpu")
    assert [r["key"] for r in rows_of(tmp_path / "out-gpu")] == [r["key"] for r in rows_of(tmp_path / "out-cpu")]
    assert gpu.manifest["fallbacks"] == {gpu_images.HOST_UNFINISHED: 1, gpu_images.HOST_CHANNELS: 1,
                                         gpu_images.HOST_FORMAT: 2}


def test_pixels_stay_on_the_device_from_decode_to_encode(tmp_path, capsys):
    """decode -> resize -> center_crop -> convert -> phash -> encode on the device: no fallback; the
    ledger's image entries are the rows' offsets and sizes and the encoded JPEG bytes, never pixels
    nor file bytes (the source keeps them on the host for decode); the rows and phashes as the CPU's within
    the bounds (phash differences printed)."""
    _parity_set(tmp_path)
    steps = [{"decode": {"mode": "RGB", "draft": False}}, {"resize": {"size": 240, "mode": "fill"}},
             {"center_crop": 224}, {"convert": "L"}, {"phash": {}}, {"encode": {"format": "jpeg", "quality": 90}}]
    cpu = _run(tmp_path, "cpu", steps, "out-cpu")
    gpu = _run(tmp_path, _gpu(), steps, "out-gpu")
    assert gpu.manifest["fallbacks"] == {}, gpu.manifest["fallbacks"]
    assert gpu.counts == cpu.counts
    by_reason = gpu.manifest["host_transfer"]["by_reason"]
    images = {r for r in by_reason if r.startswith("images:")}
    # decode comes right after the source: the file bytes stayed on the host for nvImageCodec
    assert images == {gpu_images.SENT_CONTROL, gpu_images.SENT_ENCODED}, by_reason
    c_rows, g_rows = rows_of(tmp_path / "out-cpu"), rows_of(tmp_path / "out-gpu")
    assert by_reason[gpu_images.SENT_ENCODED] == sum(len(r["image"]) for r in g_rows)
    assert by_reason[gpu_images.SENT_CONTROL] < by_reason[gpu_images.SENT_ENCODED]
    assert [(r["key"], r["width"], r["height"], r["channels"], r["format"]) for r in g_rows] == \
        [(r["key"], r["width"], r["height"], r["channels"], r["format"]) for r in c_rows]
    _compare([(pixels(c), pixels(g)) for c, g in zip(c_rows, g_rows)], "device chain, grey 224 JPEG", capsys)
    differ = sum(c["phash"] != g["phash"] for c, g in zip(c_rows, g_rows))
    bits = [bin((c["phash"] ^ g["phash"]) & (2**64 - 1)).count("1") for c, g in zip(c_rows, g_rows)]
    with capsys.disabled():
        print(f"[images parity] device phash differs on {differ}/{len(c_rows)} rows, at most {max(bits)} bits")
    assert max(bits) <= 12                         # a wrong bit order or DCT would differ in ~32
