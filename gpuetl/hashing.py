"""One 64-bit row hash for every backend, written once against the array API numpy and CuPy share.

Shards, splits, shuffles and dedupe all hash rows; a row must land in the same shard and split
on the CPU and the GPU, so the hash is defined here, on the values' bytes (UTF-8 for strings,
the 64-bit pattern for numbers and timestamps), not borrowed from pandas or cuDF, whose hashes
differ. Strings are consumed eight bytes per step; each step is one vectorised pass.
"""

from __future__ import annotations

_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15
_NULL = 0x5BD1E9955BD1E995


def _mix(xp, h):
    """splitmix64's finaliser: a bijection with full avalanche."""
    h = h ^ (h >> xp.uint64(30))
    h = h * xp.uint64(_M1)
    h = h ^ (h >> xp.uint64(27))
    h = h * xp.uint64(_M2)
    return h ^ (h >> xp.uint64(31))


_SIGN = 0x8000000000000000                # -0.0's bits
_EXPONENT = 0x7FF0000000000000
_MANTISSA = 0x000FFFFFFFFFFFFF
_NAN = 0x7FF8000000000000                 # the one NaN canonical floats hash as


def hash_columns(backend, columns: list, seed: int = 0, canonical_floats: bool = False):
    """uint64 per row, combining the columns in order; nulls hash to a fixed value.
    canonical_floats: hash -0.0 as 0.0 and every NaN (any sign or payload) as one NaN, so values
    that compare equal, and NaNs, meet (Backend.row_hash, exact dedupe's key hash: the rule of
    the CPU's polars row hash). hash64 keeps the plain bits (shards and splits depend on it)."""
    xp = backend.xp
    n = len(columns[0]) if columns else 0
    h = xp.full(n, (_GOLDEN * (seed + 1)) & 0xFFFFFFFFFFFFFFFF, dtype=xp.uint64)
    with _quiet(xp):
        for col in columns:
            part = (_hash_strings(backend, col) if _is_string(backend, col)
                    else _hash_fixed(backend, col, canonical_floats and _is_float(col)))
            h = _mix(xp, h ^ (part + xp.uint64(_GOLDEN) + (h << xp.uint64(6)) + (h >> xp.uint64(2))))
    return h


def _is_string(backend, col) -> bool:
    return col.dtype == backend.dtype("string") or str(col.dtype) in ("object", "str", "string")


def _is_float(col) -> bool:
    return getattr(col.dtype, "kind", "") == "f"


def canonical_float_bits(xp, bits):
    """float64 bit patterns (uint64) with -0.0 made 0.0 and every NaN the one quiet NaN."""
    nan = ((bits & xp.uint64(_EXPONENT)) == xp.uint64(_EXPONENT)) & ((bits & xp.uint64(_MANTISSA)) != xp.uint64(0))
    bits = xp.where(bits == xp.uint64(_SIGN), xp.uint64(0), bits)
    return xp.where(nan, xp.uint64(_NAN), bits)


def _hash_fixed(backend, col, canonical: bool = False):
    xp = backend.xp
    values, valid = backend.fixed_width(col)
    if canonical:
        values = canonical_float_bits(xp, values)
    return xp.where(valid, _mix(xp, values ^ xp.uint64(_GOLDEN)), xp.uint64(_NULL))


def _hash_strings(backend, col):
    """Eight bytes (little-endian, zero-padded past the end) per step. Rows are visited longest
    first, so step w touches only the rows longer than w: work follows the total bytes, not
    rows × the longest string."""
    xp = backend.xp
    offsets, data, valid = backend.string_buffers(col)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    h = _mix(xp, lengths.astype(xp.uint64) ^ xp.uint64(_M2))
    if len(data) == 0 or len(lengths) == 0:
        return xp.where(valid, h, xp.uint64(_NULL))
    order = xp.argsort(-lengths, kind="stable")
    s_starts, s_lengths, s_h = starts[order], lengths[order], h[order]
    padded = xp.concatenate([data, xp.zeros(8, dtype=xp.uint8)])
    words = xp.lib.stride_tricks.as_strided(padded, shape=(len(data), 8), strides=(1, 1))
    active_counts = xp.searchsorted(-s_lengths, -xp.arange(0, int(s_lengths[0]), 8), side="left")
    for step, word in enumerate(range(0, int(s_lengths[0]), 8)):
        k = int(active_counts[step])
        value = xp.ascontiguousarray(words[s_starts[:k] + word]).view(xp.uint64).reshape(k)
        left = s_lengths[:k] - word
        keep = xp.where(left >= 8, xp.uint64(0xFFFFFFFFFFFFFFFF),
                        (xp.uint64(1) << (xp.minimum(left, 7).astype(xp.uint64) * xp.uint64(8))) - xp.uint64(1))
        s_h[:k] = _mix(xp, (s_h[:k] ^ (value & keep)) * xp.uint64(_M1) + xp.uint64(word + 1))
    h = xp.empty_like(h)
    h[order] = s_h
    return xp.where(valid, h, xp.uint64(_NULL))


def _quiet(xp):
    """uint64 arithmetic wraps by design; silence numpy's overflow warnings (this thread's error
    state, restored on exit; CuPy's device arithmetic does not warn)."""
    import numpy

    return numpy.errstate(over="ignore")
