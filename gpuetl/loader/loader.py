"""gpuetl.Loader: one split of a finished dataset as training batches, in an order that is a
function of (seed, epoch) only (order.py), split across ranks, read ahead by threads, resumable."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from ..backends.batches import BatchSpec, check_device, device_batches, storage_dtype
from ..errors import DataError, SpecError
from . import order as order_mod
from .dataset import Dataset

OUTPUTS = {"cpu": ("numpy", "arrow", "torch"), "cuda": ("cupy", "torch")}
STATE_VERSION = 1
CHUNK_ROWS = 8192       # a reader thread decodes a row group this many rows at a time (host path)
OFFSET_LIMIT = (1 << 31) - 1   # bytes of a string, binary or list column past which its 32-bit offsets overflow


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.wait_s = self.first_wait_s = self.read_s = self.assemble_s = 0.0
        self.rows_read = self.bytes_read = self.batches = self.groups_read = 0

    def add(self, **kw):
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def _column_kind(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return "numeric"
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_duration(t):
        return "time"
    return "arrow"


class Loader:
    """Batches (dict of column name -> array) of one split of a committed gpuetl dataset.

    Iterating the loader runs one epoch (from where a loaded state left off) and then moves to the
    next epoch; `set_epoch` picks one. docs/consuming.md says what is guaranteed."""

    def __init__(self, dataset, split: str | None = "train", columns=None, batch_size: int = 1024,
                 shuffle: bool = True, seed: int = 0, epoch: int = 0, rank: int = 0, world_size: int = 1,
                 drop_last: bool = True, prefetch: int = 2, device: str = "cpu", output: str | None = None,
                 cache=None, verify: bool = False, shuffle_buffer: int = 10_000, num_workers: int = 2,
                 storage_options: dict | None = None, decode_images: str | None = None,
                 image_column: str = "image", dataset_version: int | None = None):
        output = output or ("numpy" if device == "cpu" else "torch")
        for name, value in (("batch_size", batch_size), ("world_size", world_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SpecError(f"Loader: {name} must be a positive integer, not {value!r}")
        for name, value in (("seed", seed), ("epoch", epoch), ("rank", rank), ("prefetch", prefetch),
                            ("num_workers", num_workers), ("shuffle_buffer", shuffle_buffer)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"Loader: {name} must be an integer >= 0, not {value!r}")
        if rank >= world_size:
            raise SpecError(f"Loader: rank {rank} is not below world_size {world_size}")
        if device not in OUTPUTS:
            raise SpecError(f"Loader: device must be 'cpu' or 'cuda', not {device!r}")
        if output not in OUTPUTS[device]:
            raise SpecError(f"Loader: device={device!r} gives output {', '.join(map(repr, OUTPUTS[device]))}, "
                            f"not {output!r}")
        if decode_images not in (None, "hwc", "chw"):
            raise SpecError(f"Loader: decode_images must be 'hwc', 'chw' or None, not {decode_images!r}")
        if decode_images and output == "arrow":
            raise SpecError("Loader: decode_images gives numpy arrays or tensors: use output='numpy' or 'torch'")
        if device == "cuda":
            check_device()
        if dataset_version is not None and (not isinstance(dataset_version, int) or isinstance(dataset_version, bool)
                                            or dataset_version < 1):
            raise SpecError(f"Loader: dataset_version must be a positive integer, not {dataset_version!r}")
        if not isinstance(dataset, (str, os.PathLike)):
            raise SpecError(f"Loader: dataset must be a dataset folder or an s3://… prefix (a str or a path), "
                            f"not {type(dataset).__name__}")
        if columns is not None:         # a str would be read as its letters
            given = columns
            try:
                columns = None if isinstance(given, (str, bytes)) else list(given)
            except TypeError:
                columns = None
            if columns is None or not all(isinstance(c, str) for c in columns):
                raise SpecError(f"Loader: columns must be a list of column names, not {given!r}"
                                + (f" (columns=[{given!r}] for one)" if isinstance(given, str) else ""))
        self.data = Dataset(dataset, split, storage_options, cache, dataset_version=dataset_version)
        names = self.data.schema.names if self.data.schema is not None else []
        if columns is not None:
            unknown = [c for c in columns if c not in names]
            if unknown:
                raise SpecError(f"Loader: no column {', '.join(map(repr, unknown))} in {self.data.root} "
                                f"(it has {', '.join(names)})")
        self.columns = columns if columns is not None else names
        self.decode_images, self.image_column = decode_images, image_column
        self.read_columns = self.columns
        if decode_images:
            needed = [image_column, "width", "height", "channels", "format"]
            missing = [c for c in needed if c not in names]
            if missing:
                raise SpecError(f"Loader: decode_images needs the image columns of an image dataset; "
                                f"{self.data.root} has no {', '.join(missing)}")
            if image_column not in self.columns:
                raise SpecError(f"Loader: decode_images decodes {image_column!r}: keep it in columns=")
            self.read_columns = self.columns + [c for c in needed[1:] if c not in self.columns]
        self.kinds = {c: _column_kind(self.data.schema.field(c).type) for c in self.columns} if names else {}
        if decode_images:
            self.kinds[image_column] = "image"
        if output in ("torch", "cupy"):
            refused = [c for c, k in self.kinds.items() if k == "arrow"]
            if refused:
                raise SpecError(f"Loader: output={output!r} takes numeric, boolean and timestamp columns; leave out "
                                f"{', '.join(refused)} (columns=[...])")
        self.batch_size, self.shuffle, self.seed, self.epoch = batch_size, shuffle, seed, epoch
        self.rank, self.world_size, self.drop_last, self.prefetch = rank, world_size, drop_last, prefetch
        self.device, self.output, self.verify = device, output, verify
        self.shuffle_buffer, self.num_workers = shuffle_buffer, num_workers
        # the table work: pyarrow on the host, or the device's (backends/batches.py); same arguments
        self._frames = _HostBatches(self) if device == "cpu" else device_batches(BatchSpec(
            columns=list(self.columns), read_columns=list(self.read_columns), kinds=dict(self.kinds),
            dtypes={c: storage_dtype(self.data.schema.field(c).type) for c, k in self.kinds.items()
                    if k in ("numeric", "time")},
            output=output, decode_images=decode_images, image_column=image_column, where=str(self.data.root)))
        # units: (shard index, row group) in manifest order
        self.units = [(s, g) for s, shard in enumerate(self.data.shards) for g in range(len(shard.group_rows))]
        self.unit_rows = [self.data.shards[s].group_rows[g] for s, g in self.units]
        self.rows = int(sum(self.unit_rows))
        self._start = 0                 # global position where the next pass begins
        self._yielded = 0               # batches handed out in the current pass
        self._pass_start = 0
        self._active = False
        self._stats = _Stats()
        self._checked: set[int] = set()
        self._check_lock = threading.Lock()

    # -- what a pass yields ---------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches this rank gets in a whole epoch."""
        return order_mod.steps(self.rows, 0, self.batch_size, self.world_size, self.drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._start = int(epoch), 0

    def order(self, epoch: int | None = None) -> order_mod.EpochOrder:
        return order_mod.EpochOrder(self.unit_rows, self.seed, self.epoch if epoch is None else epoch,
                                    self.shuffle, self.shuffle_buffer)

    def __iter__(self):
        start = self._start
        n_steps = order_mod.steps(self.rows, start, self.batch_size, self.world_size, self.drop_last)
        self._pass_start, self._yielded, self._active = start, 0, True
        produced = self._produce(self.order(), start, n_steps)
        if self.prefetch:
            produced = _ahead(produced, max(self.prefetch - _assembling_depth(self.num_workers, self.prefetch), 1))
        finished = False
        try:
            while True:
                t0 = time.perf_counter()
                try:
                    batch = next(produced)
                except StopIteration:
                    break
                waited = time.perf_counter() - t0
                self._stats.add(wait_s=waited, batches=1, **({"first_wait_s": waited} if not self._yielded else {}))
                self._yielded += 1
                if self._yielded >= n_steps:
                    # the epoch's last batch: the epoch is done before it is handed out, so a consumer
                    # that stops after len(loader) batches (islice) and never asks for the end still
                    # has the next pass (and state_dict) at the next epoch, as a resumed loader would
                    self.epoch, self._start, finished = self.epoch + 1, 0, True
                else:
                    self._start = start + self._yielded * self.world_size * self.batch_size
                yield batch
            if not finished:                                       # a pass of no batches: the epoch is done too
                self.epoch, self._start = self.epoch + 1, 0
        finally:
            self._active = False
            close = getattr(produced, "close", None)
            if close:
                close()

    # -- resuming -------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where the consumer is: the global position after the batches handed out so far (the
        same on every rank), with what fixes the order. Batches read ahead are not counted."""
        return {"version": STATE_VERSION, "manifest_sha256": self.data.manifest_sha256, "split": self.data.split,
                "seed": self.seed, "shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer,
                "epoch": self.epoch, "position": self._start, "rows": self.rows,
                "batch_size": self.batch_size, "world_size": self.world_size}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` (taken on any rank, with any world_size, batch size or number of
        workers): the global order goes on from its position."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise SpecError("Loader.load_state_dict: not a state from Loader.state_dict()")
        for key, mine in (("manifest_sha256", self.data.manifest_sha256), ("split", self.data.split),
                          ("seed", self.seed), ("shuffle", self.shuffle), ("shuffle_buffer", self.shuffle_buffer)):
            if state.get(key) != mine:
                raise SpecError(f"Loader.load_state_dict: the state has {key}={state.get(key)!r}, this loader "
                                f"{mine!r}: the order would not be the same one")
        for key in ("epoch", "position"):
            value = state.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(f"Loader.load_state_dict: the state's {key} is not an integer >= 0 ({value!r})")
        position = state["position"]
        self.epoch, self._start = state["epoch"], position
        if not order_mod.steps(self.rows, position, self.batch_size, self.world_size, self.drop_last):
            self.epoch, self._start = self.epoch + 1, 0        # nothing left of that epoch: the next one

    def torch_dataset(self):
        """This loader as a torch IterableDataset (torch_adapter.py)."""
        from .torch_adapter import torch_dataset

        return torch_dataset(self)

    # -- seeing it ------------------------------------------------------------------------------

    def stats(self) -> dict:
        """Seconds the consumer waited for batches, seconds spent reading and decoding row groups
        and cutting and converting batches (summed over threads), rows and bytes (compressed) read."""
        s = self._stats
        with s.lock:
            return {"wait_s": s.wait_s, "first_wait_s": s.first_wait_s, "read_s": s.read_s, "assemble_s": s.assemble_s, "rows_read": s.rows_read,
                    "bytes_read": s.bytes_read, "row_groups_read": s.groups_read, "batches": s.batches}

    # -- making batches -------------------------------------------------------------------------

    def _images(self, table: pa.Table, pool) -> np.ndarray:
        """The batch's images as one uint8 array, (B, H, W, C) or (B, C, H, W), decoded as the CPU
        image steps decode (backends/cpu_images.py): a JPEG by TurboJPEG straight into the batch's
        array where that gives Pillow's pixels, anything else by `decode`; every image must have
        the same size."""
        from ..backends import cpu_images

        w, h, c = (table.column(k).to_pylist() for k in ("width", "height", "channels"))
        sizes = set(zip(w, h, c))
        if len(sizes) > 1:
            raise DataError(f"{self.data.root}: the images of a batch differ in size ({sorted(sizes)[:3]}…): "
                            "decode_images needs a dataset resized to one size (the resize step)")
        H, W, C = (h[0], w[0], c[0]) if w else (0, 0, 0)
        images, formats = table.column(self.image_column), table.column("format").to_pylist()
        chw = self.decode_images == "chw"
        out = np.empty((len(w), C, H, W) if chw else (len(w), H, W, C), np.uint8)
        scratch = np.empty((H, W, C), np.uint8)       # CHW: each image decoded here, moved while cache-hot
        for i, fmt in enumerate(formats):
            data = images[i].as_buffer() if images[i].is_valid else None
            target = scratch if chw else out[i]
            if not (fmt != "raw" and data is not None
                    and cpu_images.decode_jpeg_into(data, cpu_images.MODES.get(C, ""), target)):
                try:
                    target[...] = _decode_one((data.to_pybytes() if data is not None else None, fmt, W, H, C))
                except (ValueError, TypeError, KeyError) as err:
                    raise DataError(f"{self.data.root}: an image of column {self.image_column!r} cannot be "
                                    f"decoded: {err}") from None
            if chw:
                out[i] = target.transpose(2, 0, 1)
        return out

    def _read_unit(self, u: int) -> pa.Table:
        s, g = self.units[u]
        shard = self.data.shards[s]
        self._verify(s)
        t0 = time.perf_counter()
        unit = self._frames.read(self.data, shard, g)
        self._stats.add(read_s=time.perf_counter() - t0, rows_read=self._frames.rows(unit),
                        bytes_read=shard.group_bytes[g], groups_read=1)
        return unit

    def _verify(self, s: int) -> None:
        """verify=True: shard s's sha256 checked against the manifest, once, before its first read."""
        if self.verify and s not in self._checked:
            with self._check_lock:
                if s not in self._checked:
                    self.data.sha256(self.data.shards[s])
                    self._checked.add(s)

    def _start_read(self, u: int, pool: ThreadPoolExecutor):
        """Unit u read by a reader thread: on the host a _Reading, whose rows a window can take as
        they are decoded; on a device the Future of the whole row group."""
        if not isinstance(self._frames, _HostBatches):
            return pool.submit(self._read_unit, u)
        reading = _Reading()
        reading.future = pool.submit(self._fill, u, reading)
        return reading

    def _fill(self, u: int, reading: "_Reading") -> None:
        s, g = self.units[u]
        shard = self.data.shards[s]
        try:
            self._verify(s)
            t0 = time.perf_counter()
            try:
                for batch in self.data.iter_group(shard, g, self.read_columns, CHUNK_ROWS):
                    if reading.stopped:         # no longer needed (behind the windows, or the pass ended)
                        break
                    reading.add(batch)
            finally:                            # a row group read in part counts its rows, its bytes pro rata
                rows = shard.group_rows[g] or 1
                self._stats.add(read_s=time.perf_counter() - t0, rows_read=reading.have,
                                bytes_read=shard.group_bytes[g] * min(reading.have, rows) // rows,
                                groups_read=int(reading.have >= shard.group_rows[g]))
        except BaseException as err:            # raised where a window takes the rows
            reading.error = err
        finally:
            reading.finish()

    def _produce(self, order: order_mod.EpochOrder, start: int, n_steps: int):
        """Batches of this rank, in order; row groups read by `num_workers` threads (or inline), batches
        cut by threads of their own (a batch never queues behind a row group's read: sharing one
        pool, the batches right after the first waited as long as it did, behind the reads ahead).
        The table work is self._frames' (host or device), on the same windows and runs."""
        frames = self._frames
        pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix="gpuetl-loader") if self.num_workers else None
        reads: dict[int, Future | pa.Table] = {}     # stream unit index -> its table (or the read under way)
        windows: dict[int, pa.Table] = {}

        def want(w: int) -> None:
            if 0 <= w < order.windows:
                for k in order.window_units(w):
                    if k not in reads and order.starts[k + 1] > order.starts[k]:    # a 0-row group: nothing to read
                        reads[k] = self._start_read(int(order.units[k]), pool) if pool else None

        def table_of(k: int):
            got = reads.get(k)
            if isinstance(got, Future):
                got = got.result()
            elif got is None:
                got = self._read_unit(int(order.units[k]))
            reads[k] = got
            return got

        def window(w: int) -> pa.Table:
            if w in windows:
                return windows[w]
            want(w)
            lo, hi = order.window_span(w)
            parts = []
            for k in order.window_units(w):
                a, b = int(order.starts[k]), int(order.starts[k + 1])
                if b > a:       # a row group of 0 rows (an empty shard) gives nothing: a reader thread's has no schema
                    parts.append((table_of(k), max(lo - a, 0), min(hi, b) - max(lo, a)))
            table = frames.window(parts, order.window_perm(w))
            for k in [k for k in reads if int(order.starts[k + 1]) <= lo]:    # row groups behind this window
                got = reads.pop(k)
                if isinstance(got, (Future, _Reading)):
                    got.cancel()                          # read ahead for a window this rank skipped
            windows.clear()
            windows[w] = table
            return table

        assembling: deque[Future] = deque()
        depth = _assembling_depth(self.num_workers, self.prefetch)
        cutters = ThreadPoolExecutor(max(depth, 1), thread_name_prefix="gpuetl-loader-cut") if pool else None
        # read ahead: the row groups of this rank's next batch, and (from the second batch on, so
        # the first read has the cores to itself) of the batch a window or a row group further on,
        # whichever is longer: a row group is asked for while the one before it is being consumed,
        # not when the batches read ahead into the queue run out (one batch ahead, the consumer
        # waited for each row group's read at every row-group boundary)
        B = self.batch_size
        far = max(1, -(-max(order.window, max(self.unit_rows, default=0)) // (B * self.world_size)))
        try:
            for j in range(n_steps):
                runs = order_mod.batch_runs(order.n, start, j, B, self.world_size, self.rank, order.window)
                if pool:
                    for jj in ((j + 1, j + far) if j else (j + 1,)):
                        if jj < n_steps:
                            after = order_mod.batch_runs(order.n, start, jj, B, self.world_size, self.rank,
                                                         order.window)
                            for w in sorted({w for w, _, _ in after}):
                                want(w)
                pieces = [frames.piece(window(w), order, w, lo, hi) for w, lo, hi in runs]
                if pool:                                # batches are cut and converted by the threads too,
                    assembling.append(cutters.submit(self._assemble, pieces))  # handed out in order
                    while len(assembling) > depth:
                        yield assembling.popleft().result()
                else:
                    yield self._assemble(pieces, None)
            while assembling:
                yield assembling.popleft().result()
        finally:
            if pool:
                for f in [*reads.values(), *assembling]:
                    if isinstance(f, (Future, _Reading)):
                        f.cancel()
                pool.shutdown(wait=True, cancel_futures=True)
                cutters.shutdown(wait=True, cancel_futures=True)

    def _assemble(self, pieces, pool=None):
        """A batch from its pieces (self._frames.piece), joined and converted."""
        t0 = time.perf_counter()
        batch = self._frames.batch(pieces, pool)
        self._stats.add(assemble_s=time.perf_counter() - t0)
        return batch

    def _convert(self, table: pa.Table, pool=None):
        if self.decode_images:
            pixels = self._images(table, pool)
        if self.output == "arrow":
            return table.combine_chunks().to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist(
                [], schema=table.schema)
        out = {}
        for name in self.columns:
            column = table.column(name).combine_chunks()
            if self.kinds[name] == "image":
                out[name] = pixels
                if self.output == "torch":
                    import torch

                    out[name] = torch.from_numpy(pixels)
                continue
            if self.kinds[name] == "arrow":
                out[name] = column
                continue
            if column.null_count:
                raise DataError(f"{self.data.root}: column {name!r} holds nulls, which a {self.output} array of "
                                f"{column.type} cannot: leave it out (columns=[...]), fill it in the pipeline, or "
                                "use output='arrow'")
            array = _to_numpy(column)
            if self.output == "torch":
                import torch

                if array.dtype.kind in "mM":
                    array = array.view(np.int64)
                # a tensor the training loop may write in place: Arrow's buffers are read-only, so
                # those are copied (one copy a batch); a writable contiguous array is shared
                writable = array.flags.writeable and array.flags.c_contiguous
                array = torch.from_numpy(array if writable else np.array(array, copy=True, order="C"))
            out[name] = array
        return out


def _large_type(t: pa.DataType) -> pa.DataType | None:
    """The 64-bit-offset type of a string, binary or list type (None: another type)."""
    if pa.types.is_string(t):
        return pa.large_string()
    if pa.types.is_binary(t):
        return pa.large_binary()
    if pa.types.is_list(t):
        return pa.large_list(t.value_field)
    return None


def _assembling_depth(workers: int, prefetch: int) -> int:
    """Batches being cut by the reader threads at once (they count against `prefetch`)."""
    return max(min(workers, prefetch - 1), 0) if workers else 0


def _decode_one(item) -> np.ndarray:
    data, fmt, w, h, c = item
    from ..backends import cpu_images

    if fmt == "raw":
        pixels = data
    else:
        try:
            pixels, dw, dh, dc = cpu_images.decode(data, cpu_images.MODES[c], 1)
        except cpu_images.BadImage as err:
            raise ValueError(str(err)) from None
        if (dw, dh, dc) != (w, h, c):
            raise ValueError(f"decodes to {dw}x{dh}x{dc}, its row says {w}x{h}x{c}")
    return np.frombuffer(pixels, dtype=np.uint8).reshape(h, w, c)


def _to_numpy(column: pa.Array) -> np.ndarray:
    """A null-free numeric, boolean or time column as numpy, in its declared dtype (times through
    their integer storage: pyarrow would import pandas for them)."""
    t = column.type
    if pa.types.is_timestamp(t) or pa.types.is_duration(t):
        kind = "datetime64" if pa.types.is_timestamp(t) else "timedelta64"
        return column.view(pa.int64()).to_numpy().view(f"{kind}[{t.unit}]")
    if pa.types.is_date32(t):
        return column.view(pa.int32()).to_numpy().astype("datetime64[D]")
    if pa.types.is_date64(t):
        return column.view(pa.int64()).to_numpy().view("datetime64[ms]")
    return column.to_numpy(zero_copy_only=False)


def _ahead(batches, depth: int):
    """Run the generator `batches` in a thread, at most `depth` batches ahead of the consumer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def run():
        try:
            for b in batches:
                while not stop.is_set():
                    try:
                        q.put((None, b), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    break
            else:
                q.put((None, done))
        except BaseException as err:            # handed to the consumer, raised there
            q.put((err, None))
        finally:
            batches.close()

    thread = threading.Thread(target=run, name="gpuetl-loader-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            err, item = q.get()
            if err is not None:
                raise err
            if item is done:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)


class _HostBatches:
    """backends.batches.BatchFrames on the host: pyarrow tables; a window kept in stream order
    and a batch's rows taken from it by the window's permutation (order.stream_rows)."""

    def __init__(self, loader: Loader):
        self.loader = loader
        self.widened: dict[str, pa.DataType] = {}      # column -> its type, where a window holds it widened

    def read(self, data: Dataset, shard, group: int) -> pa.Table:
        return data.read_group(shard, group, self.loader.read_columns)

    def rows(self, table: pa.Table) -> int:
        return table.num_rows

    def window(self, parts, perm) -> pa.Table:
        sliced = [(t.upto(a + n) if isinstance(t, _Reading) else t).slice(a, n) for t, a, n in parts]
        table = pa.concat_tables(sliced) if len(sliced) > 1 else sliced[0]
        table = self._widen(table)
        return table.combine_chunks() if any(c.num_chunks > 1 for c in table.columns) else table

    def _widen(self, table: pa.Table) -> pa.Table:
        """A window whose string, binary or list column holds more than OFFSET_LIMIT bytes (raw
        images, long texts: a shuffle window of 2 GiB) holds that column with 64-bit offsets: with
        32-bit ones it cannot be one array, and taking a batch's rows out of it failed with Arrow's
        offset overflow. Batches get the column's own type back (batch)."""
        fields = list(table.schema)
        for i, f in enumerate(fields):
            large = _large_type(f.type)
            if large is not None and table.column(i).nbytes > OFFSET_LIMIT:
                self.widened.setdefault(f.name, f.type)
                fields[i] = f.with_type(large)
        return table.cast(pa.schema(fields, table.schema.metadata)) if fields != list(table.schema) else table

    def piece(self, window: pa.Table, order: order_mod.EpochOrder, w: int, lo: int, hi: int):
        return window, order.stream_rows(w, np.arange(lo, hi, dtype=np.int64))

    def batch(self, pieces, pool=None):
        """Rows taken, joined and converted (Loader._convert)."""
        taken = [self._narrow(table.take(pa.array(rows))) for table, rows in pieces]
        return self.loader._convert(taken[0] if len(taken) == 1 else pa.concat_tables(taken), pool)

    def _narrow(self, table: pa.Table) -> pa.Table:
        """A batch's rows of a widened window (_widen) in the columns' own types."""
        if not self.widened:
            return table
        fields = [f.with_type(self.widened[f.name]) if f.name in self.widened else f for f in table.schema]
        if fields == list(table.schema):
            return table
        try:
            return table.cast(pa.schema(fields, table.schema.metadata))
        except pa.ArrowInvalid:
            big = max((f.name for f in table.schema if f.name in self.widened), key=lambda c: table.column(c).nbytes)
            raise DataError(f"{self.loader.data.root}: a batch of {table.num_rows} rows holds over 2 GiB of column "
                            f"{big!r}, more than one Arrow {self.widened[big]} array holds: use a smaller "
                            "batch_size") from None


class _Reading:
    """A row group being read by a reader thread, CHUNK_ROWS rows at a time: a window takes the
    rows it needs as soon as they are decoded, so a pass's first batch waits for its own rows,
    not for its whole row group (65,536 rows where a window is 10,000)."""

    def __init__(self):
        self.chunks: list[pa.RecordBatch] = []
        self.have = 0
        self.done = self.stopped = False
        self.error: BaseException | None = None
        self.future: Future | None = None
        self.cond = threading.Condition()

    def add(self, batch: pa.RecordBatch) -> None:
        with self.cond:
            self.chunks.append(batch)
            self.have += batch.num_rows
            self.cond.notify_all()

    def finish(self) -> None:
        with self.cond:
            self.done = True
            self.cond.notify_all()

    def cancel(self) -> None:
        self.stopped = True
        if self.future is not None and self.future.cancel():     # never started: nothing will finish it
            self.finish()

    def upto(self, n: int) -> pa.Table:
        """The rows read so far, once there are at least n (or the read ended: all of them)."""
        with self.cond:
            while self.have < n and not self.done:
                self.cond.wait()
            if self.error is not None:
                raise self.error
            return pa.Table.from_batches(self.chunks)
