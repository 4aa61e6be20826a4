"""GPU forms of the text kernels used by the cleaning steps (normalize_text, mask, near-dedupe).

Mixed into GpuBackend (gpu.py). Like gpu.py, this module may import cudf/cupy, lazily."""

from __future__ import annotations


class GpuTextMixin:
    """Text kernels on cuDF: filled in by the steps issue."""
