from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..backends.base import FILE_INDEX, OFFSET, STATUS, STATUS_DEDUPLICATED, STATUS_LIVE
from ..types import Schema
from .base import Params, Binding, GlobalStep, StepError, register
from .select import missing

VALID = "__mhv"     # bool: the row takes part (live, text not null)
BAND = "__band"     # __band0 ..: uint64 bucket of each band (live rows), identity hash (others)
FLAG = "__ndup"     # bool: marked as a near-duplicate in some band
SIG = "__sig"       # the row's whole signature, packed (where the backend can carry one)


class NearDedupeParams(Params):
    column: str = Field(..., description="the text column to compare")
    threshold: float = Field(0.8, gt=0.0, le=1.0, description="estimated Jaccard similarity at or above which a row is a near-duplicate")
    shingle: Literal["char", "word"] = Field("char", description="char: substrings of `width` characters; word: runs of `width` words")
    width: int | None = Field(None, ge=1, le=64, description="shingle width (default 5 characters or 3 words; characters need >= 2)")
    bands: int = Field(16, ge=1, le=64, description="LSH bands: more find less similar pairs, at more cost")
    rows: int = Field(8, ge=1, le=64, description="MinHash values per band; the signature has bands x rows values")
    seed: int = Field(0, ge=0, lt=2**32, description="seed of the shingle hash and of the permutations")

    @model_validator(mode="after")
    def _check(self):
        if self.shingle == "char" and self.width is not None and self.width < 2:
            raise ValueError("width: character shingles need a width of 2 or more (as cuDF's minhash)")
        if self.bands * self.rows > 1024:
            raise ValueError("bands x rows: at most 1024 MinHash values per row")
        return self

    @property
    def shingle_width(self) -> int:
        return self.width if self.width is not None else (5 if self.shingle == "char" else 3)

    @property
    def num_hashes(self) -> int:
        return self.bands * self.rows


def permutations(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The (a, b) parameters of the MinHash permutations v = hv * a + b (mod 2**32), from the
    seed alone (numpy's PCG64 on the host, so every backend and worker gets the same). `a` is odd:
    multiplying by an odd number is a bijection mod 2**32, so no permutation collapses hashes."""
    rng = np.random.default_rng([seed, 0x6E656172])
    a = rng.integers(0, 2**31, size=count, dtype=np.uint64).astype(np.uint32) * np.uint32(2) + np.uint32(1)
    b = rng.integers(0, 2**32, size=count, dtype=np.uint64).astype(np.uint32)
    return a, b


def match_probability(similarity: float, bands: int, rows: int) -> float:
    """Chance that two rows of this Jaccard similarity share at least one band bucket."""
    return 1.0 - (1.0 - similarity ** rows) ** bands


@register
class NearDedupe(GlobalStep):
    """How: each row's text gets a MinHash signature of bands x rows values (libcudf's nvtext
    minhash scheme on both backends: MurmurHash3_x86_32 of each shingle with `seed`, permuted as
    hv * a + b mod 2**32, the minimum per permutation; see backends/cpu_text.py). The signature is
    cut into `bands` bands of `rows` values; two rows whose values agree on a whole band share that
    band's bucket. No row moves: each partition sends its rows' buckets, one task finds the buckets
    two rows share, each partition sends those rows' signatures, and one task compares them, band by
    band. Inside a bucket the rows are taken in input order (file,
    then byte offset); a row is marked when the fraction of equal signature values between it and
    one of the bucket's rows kept so far (the estimated Jaccard similarity) is at least
    `threshold`, else it is kept for that bucket. A row marked in any band is removed and counted
    as deduplicated; the first of a group of near-copies always stays. The outcome depends only on
    the data and the parameters, not on partitions, workers or the backend. Limits: the estimate
    has a standard error of about sqrt(J(1-J)/(bands*rows)) (0.035 at J=0.8 with 128 values), so
    pairs near the threshold may go either way; pairs that share no bucket are never compared (a
    pair of similarity J shares one with probability 1-(1-J^rows)^bands: 0.95 at J=0.8 with the
    default 16x8, 0.35 at J=0.6); near-copies are not chained: A~B and B~C remove B and C only if
    each meets its kept neighbour in a bucket. Cost: 8 bytes per row and band go to one task, and
    the signatures of rows that share a bucket (4 bytes per value) to another; rows whose text is
    null are never duplicates, empty texts are
    duplicates of each other. Character shingles are Unicode characters of the text as it is: put
    normalize_text before this step to ignore case and spacing."""

    name = "near_dedupe"
    summary = "Remove near-duplicate texts across all partitions (MinHash + LSH, Jaccard threshold), keeping the first by file and offset."
    example = "- near_dedupe: {column: message, threshold: 0.8, shingle: char, width: 5, bands: 16, rows: 8}"
    Params = NearDedupeParams

    def derive(self, schema: Schema) -> Binding:
        missing(schema, [self.params.column])
        if schema[self.params.column] != "string":
            raise StepError(f"near_dedupe: column {self.params.column!r} is {schema[self.params.column]}, not string")
        return Binding(dict(schema))

    # -- the extra columns: validity, band buckets, the flag, the packed signature ----------
    @property
    def band_columns(self) -> list[str]:
        return [f"{BAND}{j}" for j in range(self.params.bands)]

    def signatures(self, text, backend):
        p = self.params
        a, b = permutations(p.seed, p.num_hashes)
        return backend.minhash(text, seed=p.seed, a=a, b=b, width=p.shingle_width, shingle=p.shingle)

    def prepare(self, df, backend):
        """Map side: signatures and band buckets of the live rows, kept in the partition (only
        the buckets, and the signatures of rows that share one, leave it)."""
        xp = backend.xp
        p = self.params
        n = len(df)
        out = df.copy()
        live = xp.asarray((df[STATUS] == STATUS_LIVE).values).astype(bool) if n else xp.zeros(0, dtype=bool)
        sig = xp.zeros((n, p.num_hashes), dtype=xp.uint32)
        valid = xp.zeros(n, dtype=bool)
        if n and bool(live.any()):
            where = xp.flatnonzero(live)
            got, ok = self.signatures(df[p.column].iloc[backend.to_host(where)], backend)
            sig[where] = got
            valid[where] = xp.asarray(ok, dtype=bool)
        out[VALID] = backend.series(valid, "bool", index=df.index)
        for j, name in enumerate(self.band_columns):       # (rows that do not take part: unused)
            if n:
                cols = [backend.series(sig[:, i], "uint32", index=df.index) for i in range(j * p.rows, (j + 1) * p.rows)]
                values = backend.hash64(cols, j + 1)
            else:
                values = xp.zeros(0, dtype=xp.uint64)
            out[name] = backend.series(values, "uint64", index=df.index)
        packed = backend.pack_rows(sig, index=df.index)
        if packed is not None:          # computed once here; candidates takes the few it needs
            out[SIG] = packed
        return out

    # -- resolved in place (runtime/graph.py: resolve_in_place) -------------------------------
    def row_keys(self, df, backend):
        """(positions of the rows that take part, their band buckets: rows x bands, uint64)."""
        if not len(df):
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.params.bands), dtype=np.uint64)
        positions = np.flatnonzero(_host(df, VALID, backend).astype(bool))
        buckets = np.stack([_host(df, c, backend)[positions] for c in self.band_columns], axis=1)
        return positions, buckets.astype(np.uint64)

    def repeated_keys(self, keys: list, backend) -> list[np.ndarray]:
        """Per band, the buckets two or more rows of the whole dataset share, sorted."""
        out = []
        for j in range(self.params.bands):
            column = np.sort(np.concatenate([b[:, j] for _, b in keys] or [np.zeros(0, np.uint64)]))
            out.append(np.unique(column[1:][column[1:] == column[:-1]]))
        return out

    def candidates(self, df, keys, repeated: list, partition: int, backend):
        """The rows that share a bucket with another row in some band: position, file, offset,
        buckets and signature."""
        positions, buckets = keys
        hit = np.zeros(len(positions), dtype=bool)
        for j, shared in enumerate(repeated):
            if len(shared) and len(positions):
                at = np.minimum(np.searchsorted(shared, buckets[:, j]), len(shared) - 1)
                hit |= shared[at] == buckets[:, j]
        rows = positions[hit]
        if not len(rows):
            return None
        if SIG in df.columns:
            sig = backend.to_host(backend.unpack_rows(df[SIG], self.params.num_hashes))[rows]
        else:
            got, _ = self.signatures(df[self.params.column].iloc[rows], backend)
            sig = backend.to_host(got)
        return {"partition": np.full(len(rows), partition, dtype=np.int64), "position": rows,
                "fi": _host(df, FILE_INDEX, backend).view(np.int64)[rows],
                "off": _host(df, OFFSET, backend).view(np.int64)[rows], "buckets": buckets[hit], "sig": sig}

    def decide(self, candidates: list, backend) -> dict[int, np.ndarray]:
        """{partition: positions of its near-duplicates}: band by band, the rows of each shared
        bucket in (file, offset) order, greedily against the ones kept before them."""
        parts = [c for c in candidates if c is not None]
        if not parts:
            return {}
        got = {k: np.concatenate([c[k] for c in parts]) for k in parts[0]}
        marked = np.zeros(len(got["position"]), dtype=bool)
        for j in range(self.params.bands):
            bucket = got["buckets"][:, j]
            _, inverse, counts = np.unique(bucket, return_inverse=True, return_counts=True)
            rows = np.flatnonzero(counts[inverse] > 1)
            if not len(rows):
                continue
            rows = rows[np.lexsort((got["off"][rows], got["fi"][rows], bucket[rows]))]
            marked[rows[self._greedy(bucket[rows], got["sig"][rows])]] = True
        return {int(p): got["position"][marked & (got["partition"] == p)]
                for p in np.unique(got["partition"][marked])}

    def mark(self, df, partition: int, decided: dict, backend):
        """The partition with FLAG set on its near-duplicates (keep drops them)."""
        flag = np.zeros(len(df), dtype=bool)
        flag[decided.get(partition, np.zeros(0, dtype=np.int64))] = True
        return df.assign(**{FLAG: backend.series(backend.xp.asarray(flag), "bool", index=df.index)})

    def _greedy(self, buckets: np.ndarray, sig: np.ndarray) -> np.ndarray:
        """Rows sorted by (bucket, file, offset): True for each row that is a near-duplicate of a
        row kept earlier in its bucket."""
        need = int(np.ceil(self.params.threshold * sig.shape[1] - 1e-9))
        marked = np.zeros(len(sig), dtype=bool)
        # exact signature repeats inside a bucket are duplicates of their first copy (J = 1)
        keyed = np.concatenate([buckets.view(np.uint32).reshape(len(buckets), 2), sig], axis=1)
        rows = np.ascontiguousarray(keyed).view(np.dtype((np.void, keyed.shape[1] * keyed.itemsize))).ravel()
        _, first = np.unique(rows, return_index=True)       # whole rows as bytes: faster than axis=0
        repeat = np.ones(len(sig), dtype=bool)
        repeat[first] = False
        marked |= repeat
        starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
        ends = np.r_[starts[1:], len(buckets)]
        for s, e in zip(starts, ends):
            members = [i for i in range(s, e) if not repeat[i]]
            if len(members) < 2:
                continue
            kept = [members[0]]
            for i in members[1:]:
                same = (sig[kept] == sig[i]).sum(axis=1)
                if int(same.max()) >= need:
                    marked[i] = True
                else:
                    kept.append(i)
        return marked

    # -- the stage itself (after the last band) -------------------------------------------
    def transform(self, df, backend):
        drop = [c for c in [VALID, SIG, *self.band_columns] if c in df.columns]
        return df.drop(columns=drop)

    def keep(self, df, backend):
        if FLAG not in df.columns or len(df) == 0:
            return None
        flag = df[FLAG].fillna(False).astype(bool)
        return ~flag if bool(flag.any()) else None



def _host(df, column: str, backend) -> np.ndarray:
    """A fixed-width column's values on the host (uint64 bits; int columns view back as int64)."""
    return backend.to_host(backend.fixed_width(df[column])[0])
