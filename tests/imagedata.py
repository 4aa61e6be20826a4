"""Small images and image pipelines for the image tests (tiny sizes: the tests stay fast)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image

from gpuetl.api import Pipeline
from gpuetl.samples import photo_like


def jpeg_bytes(w=64, h=48, seed=0, **save) -> bytes:
    buf = io.BytesIO()
    photo_like(np.random.default_rng(seed), w, h).save(buf, "JPEG", quality=save.pop("quality", 90), **save)
    return buf.getvalue()


def image_bytes(img: Image.Image, fmt: str, **save) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def photo_folder(root: Path, n: int = 6, classes=("cat", "dog"), w=64, h=48) -> list[Path]:
    return [write(root / classes[i % len(classes)] / f"{i:03d}.jpg", jpeg_bytes(w, h, seed=i)) for i in range(n)]


def image_spec(path="photos/**/*", steps=None, sink="out", **extra) -> dict:
    source = {"type": "images", "path": path, **extra.pop("source", {})}
    spec = {"version": 1, "name": "imgs", "source": source,
            "steps": steps if steps is not None else [{"decode": {}}, {"resize": {"size": [32, 32], "mode": "fill"}},
                                                       {"encode": {"format": "jpeg", "quality": 90}}],
            "sink": {"path": sink, "mode": "overwrite"}}
    spec.update(extra)
    return spec


def run_images(tmp_path: Path, scheduler="sync", **kwargs):
    return Pipeline.from_dict(image_spec(**kwargs), base_dir=tmp_path).run(backend="cpu", scheduler=scheduler)


def rows_of(out: Path, split: str = "") -> list[dict]:
    files = sorted((out / split).glob("part-*.parquet")) if split else sorted(out.glob("**/part-*.parquet"))
    return [r for f in files if "_quarantine" not in str(f) for r in pq.read_table(f).to_pylist()]


def quarantine_of(out: Path) -> list[dict]:
    return [r for f in sorted((out / "_quarantine").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def manifest_of(out: Path) -> dict:
    return json.loads((out / "_manifest.json").read_text())


def balanced(result) -> bool:
    c = result.counts
    return c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]


def pixels(row: dict) -> np.ndarray:
    """An output row's image as an array (decoded if encoded)."""
    if row["format"] == "raw":
        return np.frombuffer(row["image"], np.uint8).reshape(row["height"], row["width"], row["channels"])
    return np.asarray(Image.open(io.BytesIO(row["image"])))
