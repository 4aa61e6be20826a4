"""GPU forms of the text kernels used by the cleaning steps (normalize_text, mask, near-dedupe).

Mixed into GpuBackend (gpu.py). Like gpu.py, this module may import cudf/cupy, lazily.
The CPU forms are in cpu_text.py; both must give the same values (tests/steps/*: gpu marker).
"""

from __future__ import annotations

WHITESPACE = " \t\n\x0b\x0c\r"
WHITESPACE_RUN = r"[ \t\n\x0b\f\r]+"     # the regex spelled with escapes: libcudf's compiler reads them
NON_ASCII = r"[^\x00-\x7f]"                # escapes, not the characters: a real NUL never matches


class GpuTextMixin:
    """Text kernels on cuDF. Needs cuDF >= 24.12 (nvtext minhash with a/b permutation parameters)."""

    def normalize_text(self, col, *, nfkc, lower, collapse_whitespace, strip):
        if nfkc:
            col = self._nfkc(col)
        if lower:
            col = self.text_lower(col)
        if collapse_whitespace:
            col = col.str.replace(WHITESPACE_RUN, " ", regex=True)
        if strip:
            col = col.str.strip(WHITESPACE)
        return col

    def _nfkc(self, col):
        """cuDF has no NFKC that matches utf8proc's (nvtext.normalize_characters is BERT-style);
        only the rows that hold non-ASCII text go to the host for pyarrow's utf8_normalize
        (ASCII is NFKC-stable), so ASCII-only logs never leave the device."""
        import cudf
        import pyarrow.compute as pc

        from .gpu_device import any_true, to_host_copy

        non_ascii = col.str.contains(NON_ASCII, regex=True).fillna(False)
        if not any_true(non_ascii):
            return col
        part = col[non_ascii]
        fixed = cudf.Series.from_arrow(pc.utf8_normalize(to_host_copy(part, "normalize_text: non-ASCII rows (NFKC)"),
                                                         form="NFKC"))
        fixed.index = part.index
        out = col.copy()
        out[non_ascii] = fixed
        return out

    def text_lower(self, col):
        return self._simple_case(col, "lower")

    def text_upper(self, col):
        return self._simple_case(col, "upper")

    def text_strip(self, col):
        """Arrow's white space (gpu_regex.UNICODE_SPACE), named: libcudf's strip() without
        characters strips every code point up to U+0020."""
        from .gpu_regex import UNICODE_SPACE

        return col.str.strip(UNICODE_SPACE)

    def _simple_case(self, col, how: str):
        """libcudf's lower/upper, except the rows holding a code point it maps otherwise than
        Arrow's simple case mapping (gpu_regex.CASE_DIFFERS: full mappings such as 'ß' -> 'SS',
        letters past U+FFFF): those rows are mapped on the host by Arrow, counted."""
        import cudf
        import pyarrow.compute as pc

        from .gpu_device import any_true, to_host_copy
        from .gpu_regex import case_differs_pattern
        from .gpu_tallies import count_fallback

        out = getattr(col.str, how)()
        differs = col.str.contains(case_differs_pattern(how), regex=True).fillna(False)
        if not any_true(differs, f"control: {how} differs"):
            return out
        part = col[differs]
        count_fallback(f"{how}: rows libcudf's case mapping gives otherwise (host)", len(part))
        host = to_host_copy(part, f"{how}: rows mapped on the host")
        fixed = cudf.Series.from_arrow(getattr(pc, f"utf8_{how}")(host))
        fixed.index = part.index
        out = out.copy()
        out[differs] = fixed
        return out

    def contains_regex(self, col, pattern):
        """matches(): the pattern in libcudf's dialect, or RE2 on the host (counted)."""
        from .gpu_device import to_host_copy
        from .gpu_regex import Unsupported, to_cudf_regex
        from .gpu_tallies import count_fallback

        try:
            return col.str.contains(to_cudf_regex(pattern), regex=True)
        except Unsupported as err:
            import cudf
            import pyarrow.compute as pc

            count_fallback(f"matches regex: {err}", len(col))
            hit = cudf.Series.from_arrow(pc.match_substring_regex(to_host_copy(col, "matches: regex on the host"),
                                                                  pattern))
            hit.index = col.index
            return hit

    def replace_regex(self, col, pattern, replacement):
        """The pattern in libcudf's dialect (gpu_regex.to_cudf_regex); one libcudf cannot run
        with RE2's meaning is replaced by the CPU kernel on the host, counted."""
        from .gpu_device import to_host_copy
        from .gpu_regex import Unsupported, to_cudf_regex
        from .gpu_tallies import count_fallback

        try:
            return col.str.replace(to_cudf_regex(pattern), replacement, regex=True)
        except Unsupported as err:
            import cudf

            from . import cpu_text

            count_fallback(f"mask regex: {err}", len(col))
            fixed = cudf.Series.from_arrow(cpu_text.replace_regex(to_host_copy(col, "mask: regex on the host"),
                                                                  pattern, replacement))
            fixed.index = col.index
            return fixed

    def minhash(self, col, *, seed, a, b, width, shingle="char"):
        import cudf
        import cupy as cp
        import numpy as np

        n = len(col)
        m = len(a)
        a_s = cudf.Series(np.asarray(a, dtype=np.uint32))
        b_s = cudf.Series(np.asarray(b, dtype=np.uint32))
        valid = cp.asarray(col.notna().values)
        if n == 0:
            return cp.zeros((0, m), dtype=cp.uint32), valid
        if shingle == "char":
            try:
                lists = col.str.minhash(np.uint32(seed), a=a_s, b=b_s, width=width)
            except TypeError as err:  # cuDF < 24.12: minhash(seeds, width), another scheme
                raise RuntimeError("near_dedupe on the GPU needs cuDF >= 24.12 (nvtext minhash with "
                                   "permutation parameters a and b)") from err
            # a null row comes back as an empty list: every row holds m values or none
            full = cp.asarray((lists.list.len() == m).fillna(False).values)
            sig = cp.zeros((n, m), dtype=cp.uint32)
            sig[full] = cp.asarray(lists.list.leaves.values, dtype=cp.uint32).reshape(-1, m)
            return sig, valid
        return self._word_minhash(col, seed, np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32), width), valid

    def _word_minhash(self, col, seed, a, b, width):
        """Word shingles as cpu_text.word_shingles builds them; each hashed with libcudf's
        MurmurHash3_x86_32 (Series.hash_values(method='murmur3', seed)), then permuted and
        reduced per row with CuPy, the same arithmetic as nvtext minhash."""
        import cudf
        import cupy as cp
        import cupyx

        from .gpu_device import to_host_copy

        n = len(col)
        norm = col.str.replace(WHITESPACE_RUN, " ", regex=True).str.strip(WHITESPACE)
        words = norm.str.split(" ")
        frame = cudf.DataFrame({"row": cp.arange(n), "w": words}).explode("w")
        frame = frame[frame["w"].notna() & (frame["w"].str.len() > 0)].reset_index(drop=True)
        counts = cp.bincount(frame["row"].values, minlength=n)
        first = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(counts)[:-1]])
        grams = cp.where(counts > 0, cp.maximum(counts - width + 1, 1), 0)
        rows = cp.repeat(cp.arange(n), to_host_copy(grams, "near_dedupe: shingle counts").tolist()) if n else cp.zeros(0, dtype=cp.int64)
        starts_of_row = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(grams)[:-1]])
        k = cp.arange(len(rows)) - starts_of_row[rows]
        start_word = first[rows] + k
        take = cp.minimum(width, counts[rows])
        flat = frame["w"]
        shingle = flat.take(start_word).reset_index(drop=True)
        for j in range(1, width):
            idx = cp.minimum(start_word + j, max(len(flat) - 1, 0))
            nxt = flat.take(idx).reset_index(drop=True)
            has = cudf.Series(take > j)
            shingle = shingle.where(~has, shingle + " " + nxt)
        m = len(a)
        sig = cp.full((n, m), cp.iinfo(cp.uint32).max, dtype=cp.uint32)
        if len(rows):
            hv = cp.asarray(shingle.hash_values(method="murmur3", seed=int(seed)).values).astype(cp.uint32)
            hv = cp.maximum(hv, cp.uint32(1))
            for j in range(m):
                v = hv * cp.uint32(a[j]) + cp.uint32(b[j])
                col_min = cp.full(n, cp.iinfo(cp.uint32).max, dtype=cp.uint32)
                cupyx.scatter_min(col_min, rows, v)
                sig[:, j] = col_min
        sig[counts == 0] = 0
        return sig
