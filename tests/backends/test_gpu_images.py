"""CPU/GPU parity of the image kernels (issue: PSNR >= 35 dB and mean absolute difference <= 2
after resize). Needs nvImageCodec, CV-CUDA and a GPU: `pytest -m gpu`; skipped cleanly elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

for _module in ("cupy", "cvcuda", "nvidia.nvimgcodec"):
    try:                       # without a GPU, cvcuda's import fails on libcuda.so.1 (OSError-like ImportError)
        __import__(_module)
    except Exception as err:   # noqa: BLE001 - any failure to load means: not here
        pytest.skip(f"needs {_module} on a GPU machine ({type(err).__name__}: {err})", allow_module_level=True)

from gpuetl.backends import cpu_images, gpu_images  # noqa: E402
from imagedata import jpeg_bytes  # noqa: E402

pytestmark = pytest.mark.gpu


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(float) - b.astype(float)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def test_decode_resize_parity_and_phash_agreement(capsys):
    images = [jpeg_bytes(500, 375, seed=i) for i in range(32)]
    target = ("fill", 224, 224)
    cpu = [cpu_images.resize(*cpu_images.decode(d, "RGB", 1), *target, "bicubic") for d in images]
    decoded = gpu_images.decode_many([(d, "RGB", 1, None) for d in images])
    assert not any(isinstance(r, Exception) for r in decoded)
    gpu = gpu_images.resize_many(decoded, *target, "bicubic")
    psnrs, mads, phash_differs = [], [], 0
    for c, g in zip(cpu, gpu):
        assert c[1:] == g[1:]
        a = np.frombuffer(c[0], np.uint8)
        b = np.frombuffer(g[0], np.uint8)
        psnrs.append(_psnr(a, b))
        mads.append(float(np.abs(a.astype(int) - b.astype(int)).mean()))
        phash_differs += cpu_images.phash(*c) != cpu_images.phash(*g)
    with capsys.disabled():
        print(f"\nimages CPU vs GPU after resize: PSNR min {min(psnrs):.1f} dB, MAD max {max(mads):.2f}, "
              f"phash differs on {phash_differs}/{len(images)} images")
    assert min(psnrs) >= 35 and max(mads) <= 2


def test_gpu_decode_quarantines_garbage_instead_of_raising():
    (out,) = gpu_images.decode_many([(b"not an image", "RGB", 1, None)])
    assert isinstance(out, cpu_images.BadImage)
