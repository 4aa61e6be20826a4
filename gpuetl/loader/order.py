"""The sample order of an epoch: a pure function of the split's row groups, (seed, epoch) and the
shuffle settings, computed the same way on every rank and whatever the number of reader threads.

1. Units: the split's row groups, in manifest order (shards as the manifest lists them, each
   shard's row groups in file order).
2. With `shuffle`, the units are permuted by numpy's PCG64 seeded with SeedSequence([seed, epoch, 0]).
   Their rows, laid end to end, make the *stream*.
3. The stream is cut into windows of `shuffle_buffer` rows; window w is permuted by PCG64 seeded
   with SeedSequence([seed, epoch, 1, w]). Position p of the global order is stream row
   `w * shuffle_buffer + perm_w[p - w * shuffle_buffer]` with w = p // shuffle_buffer.
   Without `shuffle` (or with shuffle_buffer <= 1) the global order is the stream itself.
4. Ranks: global batch g holds positions [g*B, (g+1)*B) and belongs to rank g % world_size, so
   local batch j of rank r is global batch j*world_size + r (counted from where the pass began).
   A pass that begins at position P0 has `steps` = (N - P0) // (W*B) batches per rank with
   drop_last, else ceil((N - P0) / (W*B)); positions p >= N (the padding of the last step)
   repeat the global order from its start (p mod N).
"""

from __future__ import annotations

import numpy as np


def _rng(*words: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in words])))


class EpochOrder:
    """Where each position of an epoch's global order lies: (unit, row within the unit)."""

    def __init__(self, unit_rows, seed: int, epoch: int, shuffle: bool, shuffle_buffer: int):
        self.unit_rows = np.asarray(unit_rows, dtype=np.int64)
        self.seed, self.epoch = seed, epoch
        self.shuffle = shuffle
        self.rows_shuffled = shuffle and shuffle_buffer > 1
        n_units = len(self.unit_rows)
        self.units = _rng(seed, epoch, 0).permutation(n_units) if shuffle else np.arange(n_units)
        rows = self.unit_rows[self.units]
        self.starts = np.zeros(n_units + 1, dtype=np.int64)     # stream offset of each unit (in stream order)
        np.cumsum(rows, out=self.starts[1:])
        self.n = int(self.starts[-1])
        # windows: shuffle_buffer rows each; without row shuffling a window is only a reading unit
        self.window = max(int(shuffle_buffer), 1) if self.rows_shuffled else max(int(shuffle_buffer), 1 << 16)
        self._perms: dict[int, np.ndarray] = {}

    @property
    def windows(self) -> int:
        return -(-self.n // self.window)

    def window_span(self, w: int) -> tuple[int, int]:
        lo = w * self.window
        return lo, min(lo + self.window, self.n)

    def window_perm(self, w: int) -> np.ndarray | None:
        """The permutation of window w (None: the identity)."""
        if not self.rows_shuffled:
            return None
        perm = self._perms.get(w)
        if perm is None:
            lo, hi = self.window_span(w)
            perm = _rng(self.seed, self.epoch, 1, w).permutation(hi - lo)
            if len(self._perms) > 4:
                self._perms.pop(next(iter(self._perms)))
            self._perms[w] = perm
        return perm

    def window_units(self, w: int) -> range:
        """Indices into the stream's unit list (self.units) that window w's rows come from."""
        lo, hi = self.window_span(w)
        first = int(np.searchsorted(self.starts, lo, side="right")) - 1
        last = int(np.searchsorted(self.starts, hi - 1, side="right")) - 1
        return range(first, last + 1)

    def stream_rows(self, w: int, within: np.ndarray) -> np.ndarray:
        """Rows of window w (offsets from its start, in stream order) for window positions `within`."""
        perm = self.window_perm(w)
        return within if perm is None else perm[within]


def steps(n: int, start: int, batch_size: int, world_size: int, drop_last: bool) -> int:
    """Batches per rank in a pass over positions start..n (see the module's point 4)."""
    left = max(n - start, 0)
    if n == 0:
        return 0
    per_step = batch_size * world_size
    return left // per_step if drop_last else -(-left // per_step)


def batch_positions(n: int, start: int, j: int, batch_size: int, world_size: int, rank: int) -> np.ndarray:
    """The global positions of local batch j of `rank` in a pass that began at `start`."""
    first = start + (j * world_size + rank) * batch_size
    pos = np.arange(first, first + batch_size, dtype=np.int64)
    return np.where(pos >= n, pos % n, pos) if n else pos


def batch_runs(n: int, start: int, j: int, batch_size: int, world_size: int, rank: int,
               window: int) -> list[tuple[int, int, int]]:
    """Local batch j of `rank` as runs of consecutive global positions, each inside one window:
    (window w, first, end) with positions w*window + first .. w*window + end - 1, in batch order.
    The same positions as batch_positions (padding past n wraps to the order's start)."""
    left = batch_size
    q = start + (j * world_size + rank) * batch_size
    q = q % n if q >= n else q
    runs = []
    while left > 0:
        w = q // window
        hi = min((w + 1) * window, n, q + left)
        runs.append((w, q - w * window, hi - w * window))
        left -= hi - q
        q = hi if hi < n else 0
    return runs
