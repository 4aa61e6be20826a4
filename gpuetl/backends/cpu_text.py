"""CPU forms of the text kernels used by the cleaning steps (normalize_text, mask, near_dedupe),
and user regexes on polars' engine (extract_groups_polars).

pyarrow.compute does the string work (RE2 regexes, utf8proc normalisation); numpy does MinHash.

MinHash here is written to libcudf's nvtext::minhash (cpp/src/text/minhash.cu, cuDF >= 24.12),
so the CPU and the GPU compute the same signatures:

* character shingles: for every character position of a string, the substring of `width`
  characters starting there; positions with fewer than `width` characters left are skipped,
  except the first, so a string shorter than `width` characters is one shingle (the whole
  string). Characters are UTF-8 code points, the shingle's bytes are hashed.
* hv = MurmurHash3_x86_32(shingle bytes, seed), then hv = max(hv, 1) (0 is libcudf's
  "no value" sentinel);
* for each permutation i: v_i = ((hv * a_i + b_i) mod 2**61-1) & 0xFFFFFFFF, computed as
  libcudf does in uint32 arithmetic, i.e. (hv * a_i + b_i) mod 2**32 (the product and the sum
  wrap at 32 bits before the modulo, which then changes nothing);
* the signature is the minimum of v_i over the shingles; an empty string gives 0 for every i,
  a null string a null row.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..parsing.rust_regex import to_rust_regex
from .cpu_clf import finish_captures, polars, polars_available, polars_lines

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)

WHITESPACE = " \t\n\x0b\x0c\r"              # the ASCII white space (after NFKC most others are U+0020)
WHITESPACE_RUN = "[" + WHITESPACE + "]+"   # literal characters: RE2 and cuDF's engine read them alike
PARAM_CHUNK = 32                           # permutations computed at once (bounds memory)
SHINGLE_CHUNK = 1 << 20                    # shingles hashed at once


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3_32(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int) -> np.ndarray:
    """MurmurHash3_x86_32 of the byte ranges data[starts[i]: starts[i] + lengths[i]], vectorised."""
    n = len(starts)
    with np.errstate(over="ignore"):
        h = np.full(n, np.uint32(seed & 0xFFFFFFFF), dtype=np.uint32)
        if n == 0:
            return h
        padded = np.concatenate([data, np.zeros(8, dtype=np.uint8)])
        starts = starts.astype(np.int64)
        lengths = lengths.astype(np.int64)
        nblocks = lengths // 4
        for block in range(int(nblocks.max(initial=0))):
            active = nblocks > block
            pos = starts + 4 * block
            k = (padded[pos].astype(np.uint32) | (padded[pos + 1].astype(np.uint32) << np.uint32(8))
                 | (padded[pos + 2].astype(np.uint32) << np.uint32(16))
                 | (padded[pos + 3].astype(np.uint32) << np.uint32(24)))
            k = _rotl(k * _C1, 15) * _C2
            mixed = _rotl(h ^ k, 13) * _M5 + _N1
            h = np.where(active, mixed, h)
        tail = lengths & 3
        tpos = starts + nblocks * 4
        k = np.zeros(n, dtype=np.uint32)
        for i in (2, 1, 0):
            byte = padded[tpos + i].astype(np.uint32) << np.uint32(8 * i)
            k ^= np.where(tail > i, byte, np.uint32(0))
        k = _rotl(k * _C1, 15) * _C2
        h = np.where(tail > 0, h ^ k, h)
        h ^= lengths.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= _F1
        h ^= h >> np.uint32(13)
        h *= _F2
        h ^= h >> np.uint32(16)
    return h


def _buffers(arr: pa.Array):
    arr = arr.cast(pa.large_string())
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    return offsets, data, valid


def char_shingles(arr: pa.Array, width: int):
    """(row of each shingle, byte start, byte length, data) for libcudf's character shingles."""
    offsets, data, valid = _buffers(arr)
    n = len(arr)
    lengths = np.where(valid, offsets[1:] - offsets[:-1], 0)
    base = offsets[0]
    window = data[base: offsets[-1]] if n else data[:0]
    # character starts: bytes that are not UTF-8 continuation bytes
    is_start = (window & 0xC0) != 0x80
    char_pos = np.flatnonzero(is_start).astype(np.int64) + base     # absolute byte positions
    row_of_char = np.searchsorted(offsets[1:], char_pos, side="right")
    chars_per_row = np.bincount(row_of_char, minlength=n)[:n] if len(char_pos) else np.zeros(n, np.int64)
    chars_per_row = np.where(valid & (lengths > 0), chars_per_row, 0)
    first_char = np.concatenate([[0], np.cumsum(chars_per_row)[:-1]]) if n else np.zeros(0, np.int64)
    idx_in_row = np.arange(len(char_pos)) - first_char[row_of_char] if len(char_pos) else np.zeros(0, np.int64)
    rows_chars = chars_per_row[row_of_char] if len(char_pos) else np.zeros(0, np.int64)
    keep = (idx_in_row + width <= rows_chars) | (idx_in_row == 0)
    keep &= valid[row_of_char] if len(char_pos) else keep
    g = np.flatnonzero(keep)
    rows = row_of_char[g]
    starts = char_pos[g]
    end_char = g + width
    row_end = offsets[rows + 1]
    full = idx_in_row[g] + width < rows_chars[g]
    ends = np.where(full, char_pos[np.minimum(end_char, len(char_pos) - 1)], row_end)
    return rows, starts, ends - starts, data, valid, lengths


def word_shingles(arr: pa.Array, width: int):
    """Word n-grams: white space runs become one space, the text is trimmed and split on spaces;
    each run of `width` consecutive words, joined by one space, is a shingle (a text with fewer
    words is one shingle). Returns the shingles as a string array with the row of each."""
    norm = pc.utf8_trim(pc.replace_substring_regex(arr, WHITESPACE_RUN, " "), WHITESPACE)
    words = pc.split_pattern(norm, " ")
    counts = np.asarray(pc.fill_null(pc.list_value_length(words), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    # an empty text splits into [""]: no words
    empty = np.asarray(pc.fill_null(pc.equal(pc.binary_length(norm), 0), True).to_numpy(zero_copy_only=False), dtype=bool)
    counts = np.where(empty, 0, counts)
    flat = pc.list_flatten(words)
    flat = flat.filter(pa.array(np.repeat(~empty, np.asarray(pc.fill_null(pc.list_value_length(words), 0)))))
    n = len(arr)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]) if n else np.zeros(0, np.int64)
    grams = np.where(counts > 0, np.maximum(counts - width + 1, 1), 0)
    rows = np.repeat(np.arange(n), grams)
    k = np.arange(len(rows)) - np.repeat(np.concatenate([[0], np.cumsum(grams)[:-1]]) if n else grams, grams)
    start_word = first[rows] + k
    take = np.minimum(width, counts[rows])
    parts = [pc.take(flat, pa.array(start_word))] if len(rows) else [pa.array([], pa.string())]
    shingle = parts[0]
    for j in range(1, width):
        nxt = pc.take(flat, pa.array(np.minimum(start_word + j, max(len(flat) - 1, 0)))) if len(rows) else shingle
        has = pa.array(take > j)
        shingle = pc.if_else(has, pc.binary_join_element_wise(shingle, nxt, " "), shingle)
    return rows, shingle


def permuted_min(rows: np.ndarray, hv: np.ndarray, n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signature matrix (n, len(a)) uint32: min over each row's shingles of (hv*a + b) mod 2**32;
    rows without shingles hold 0 (libcudf's value for an empty string)."""
    m = len(a)
    out = np.full((n, m), np.iinfo(np.uint32).max, dtype=np.uint32)
    has = np.zeros(n, dtype=bool)
    has[rows] = True
    if len(rows):
        order = np.argsort(rows, kind="stable") if np.any(rows[1:] < rows[:-1]) else None
        if order is not None:
            rows, hv = rows[order], hv[order]
        seg_rows, seg_start = np.unique(rows, return_index=True)
        hv = np.maximum(hv, np.uint32(1))
        with np.errstate(over="ignore"):
            for j in range(0, m, PARAM_CHUNK):
                aa = a[j: j + PARAM_CHUNK].astype(np.uint32)
                bb = b[j: j + PARAM_CHUNK].astype(np.uint32)
                v = hv[:, None] * aa[None, :] + bb[None, :]
                out[seg_rows, j: j + PARAM_CHUNK] = np.minimum.reduceat(v, seg_start, axis=0)
    out[~has] = 0
    return out


def minhash(arr: pa.Array, *, seed: int, a: np.ndarray, b: np.ndarray, width: int, shingle: str = "char"):
    """(uint32 signatures (n, len(a)), valid bool (n,)) as libcudf's minhash computes them."""
    n = len(arr)
    if shingle == "char":
        rows, starts, lengths, data, valid, _ = char_shingles(arr, width)
        hv = np.empty(len(rows), dtype=np.uint32)
        for i in range(0, len(rows), SHINGLE_CHUNK):
            sl = slice(i, i + SHINGLE_CHUNK)
            hv[sl] = murmur3_32(data, starts[sl], lengths[sl], seed)
    else:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        rows, shingles = word_shingles(arr, width)
        offsets, data, _ = _buffers(shingles)
        hv = murmur3_32(data, offsets[:-1], offsets[1:] - offsets[:-1], seed)
    sig = permuted_min(rows, hv, n, np.asarray(a), np.asarray(b))
    return sig, valid


def normalize(arr: pa.Array, *, nfkc: bool, lower: bool, collapse_whitespace: bool, strip: bool) -> pa.Array:
    if nfkc:
        arr = pc.utf8_normalize(arr, form="NFKC")
    if lower:
        arr = pc.utf8_lower(arr)
    if collapse_whitespace:
        arr = pc.replace_substring_regex(arr, WHITESPACE_RUN, " ")
    if strip:
        arr = pc.utf8_trim(arr, WHITESPACE)
    return arr


def replace_regex(arr: pa.Array, pattern: str, replacement: str) -> pa.Array:
    """Replace every match (RE2) with a literal replacement."""
    return pc.replace_substring_regex(arr, pattern, replacement.replace("\\", "\\\\"))


# -- user regexes on polars' engine ------------------------------------------------------------

MATCHED = "__matched"        # the group around the whole regex: null where a line does not match


@functools.cache
def polars_regex(regex: str) -> str | None:
    """`regex` for polars' str.extract_groups (parsing/rust_regex.py), inside one more group
    that tells a match from a non-match (a group that takes no part is null either way), or
    None: RE2 runs it. Compiled once here, so a pattern polars refuses is found before data."""
    if not polars_available():
        return None
    rust = to_rust_regex(regex)
    if rust is None:
        return None
    wrapped = f"(?P<{MATCHED}>{rust})"
    try:
        polars().Series([""]).str.extract_groups(wrapped)
    except Exception:        # over the engine's size limit, say: RE2 runs it
        return None
    return wrapped


def extract_groups_polars(arr, pattern: str, names: tuple[str, ...], dash_is_null: bool):
    """({name: pa.StringArray}, matched) as RE2's extract_regex gives them after the parser's
    rules (an empty capture is null, and '-' too with dash_is_null), for a `pattern` from
    polars_regex. `arr` may be chunked (a partition's batches): read chunk by chunk, each
    column handed back in one piece."""
    pl = polars()
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    frames = [pl.DataFrame({"line": polars_lines(c)}).select(pl.col("line").str.extract_groups(pattern).alias("g"))
              .unnest("g") for c in chunks] or [_empty_groups(pattern)]
    frame = frames[0] if len(frames) == 1 else pl.concat(frames, rechunk=True)
    matched = frame.get_column(MATCHED).is_not_null().to_numpy()
    return finish_captures(frame, names, null_empty=True, null_dash=dash_is_null), matched


def _empty_groups(pattern: str):
    pl = polars()
    return pl.DataFrame({"line": pl.Series([], dtype=pl.String)}).select(
        pl.col("line").str.extract_groups(pattern).alias("g")).unnest("g")
