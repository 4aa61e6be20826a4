"""A finished dataset as the loader sees it: the committed manifest (refused without a `_SUCCESS`
that holds its sha256), the split's shards with their row groups, each checked against the
Parquet footer; shards opened for reading, locally or in an object store, never by listing."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError, SpecError
from ..sinks.commit import MANIFEST, SUCCESS, success_bytes, unsafe_reason
from ..sinks.dataset import read_listed, read_manifest, regular_file
from ..sinks.versions import select_version
from ..storage import is_remote


@dataclass
class Shard:
    path: str                  # relative to the dataset
    rows: int
    bytes: int
    sha256: str
    metadata: object = None    # pyarrow FileMetaData, from the footer
    group_rows: list[int] = field(default_factory=list)
    group_bytes: list[int] = field(default_factory=list)   # compressed bytes of each row group


class Dataset:
    """One split of a committed dataset (local folder or s3://… prefix)."""

    def __init__(self, root, split: str | None, storage_options: dict | None = None, cache: dict | None = None,
                 dataset_version: int | None = None):
        self.remote = is_remote(root)
        self.options = storage_options
        self.local_copies: dict[str, str] = {}        # shard path -> its copy in the cache tier
        self._inputs = None
        if self.remote:
            from ..sinks.objectstore import read_remote_manifest
            from ..storage import filesystem

            reader, manifest = read_remote_manifest(str(root), storage_options)
            self.root = reader.url
            self.fs = filesystem(self.root, storage_options)
            raw, success = reader.read(MANIFEST), reader.read(SUCCESS, 1 << 16)
            self._remote_reader = reader
        else:
            folder, manifest = read_manifest(root)
            self.root, self.fs = str(folder), None
            raw = (folder / MANIFEST).read_bytes()
            success = self._local_success(folder)
        where = f"{self.root}/{SUCCESS}"
        if success is None:
            raise DataError(f"{where}: missing; the dataset is not complete (a run or a commit did not finish, or is "
                            f"under way); `gpuetl verify --repair {self.root}` finishes an interrupted commit")
        if raw is None or success != success_bytes(raw) or json.loads(raw) != manifest:
            raise DataError(f"{where}: does not hold the sha256 of the _manifest.json beside it (a commit is under way "
                            f"or was interrupted, or the manifest was edited); run `gpuetl verify {self.root}`")
        self.manifest_sha256 = hashlib.sha256(raw).hexdigest()
        if dataset_version is not None:      # an earlier version: its manifest, as the latest lists it
            read = self._remote_reader.read if self.remote else (lambda rel: read_listed(folder, rel))
            manifest, version_raw = select_version(manifest, dataset_version, read, self.root)
            if version_raw is not None:
                self.manifest_sha256 = hashlib.sha256(version_raw).hexdigest()
        self.manifest = manifest
        shards = manifest.get("shards")
        if not isinstance(shards, list):
            raise DataError(f"{where[:-len(SUCCESS)]}{MANIFEST}: `shards` is not a list")
        splits = sorted({s.get("split") for s in shards if isinstance(s, dict)}, key=str)
        if split is not None and split not in splits:
            has = ("no splits: pass split=None" if splits == [""] else
                   f"it has {', '.join(map(str, splits))}" if splits else "it has no shards")
            raise SpecError(f"{self.root}: no split {split!r} in the manifest ({has})")
        self.split = split
        self.shards: list[Shard] = []
        for entry in shards:
            if split is not None and entry.get("split") != split:
                continue
            rel = entry.get("path")
            if unsafe_reason(rel) or not all(isinstance(entry.get(k), int) for k in ("rows", "bytes")):
                raise DataError(f"{self.root}/{MANIFEST}: a shard entry without a path inside the dataset, rows or bytes")
            self.shards.append(Shard(rel, entry["rows"], entry["bytes"], str(entry.get("sha256"))))
        if cache is not None:
            self._fill_cache(cache)
        self.schema = None
        for shard in self.shards:
            self._footer(shard)

    def _fill_cache(self, cache) -> None:
        """Copy the split's shards into the cache tier (the pipeline file's `cache` mapping), or
        find them there (same ETag and size); shards are then read from those files."""
        if not self.remote:
            return
        from pydantic import ValidationError

        from ..cache import RemoteInputs
        from ..spec.models import Cache
        from ..storage import head, join

        try:
            spec = Cache.model_validate(cache)
        except ValidationError as err:
            raise SpecError(f"Loader: cache: {err.errors()[0]['msg']} (a mapping with path and max_bytes)") from None
        objects = []
        for shard in self.shards:
            obj = head(join(self.root, shard.path), self.options)
            if obj is None or obj.size != shard.bytes:
                raise DataError(f"{self.where(shard)}: " + ("missing" if obj is None else f"{obj.size} bytes") +
                                f", the manifest says {shard.bytes} bytes; run `gpuetl verify {self.root}`")
            objects.append(obj)
        self._inputs = RemoteInputs(self.options, os.path.expanduser(spec.path), spec.max_bytes)
        copies = self._inputs.local_copies(objects)
        self.local_copies = {shard.path: copies[obj.url] for shard, obj in zip(self.shards, objects)}

    @staticmethod
    def _local_success(folder: Path) -> bytes | None:
        try:
            st = os.lstat(folder / SUCCESS)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise DataError(f"{folder / SUCCESS}: not a regular file; gpuetl does not follow links in a dataset")
        return (folder / SUCCESS).read_bytes()

    def where(self, shard: Shard) -> str:
        return f"{self.root}/{shard.path}"

    def _size(self, shard: Shard) -> int | None:
        if shard.path in self.local_copies:
            return os.stat(self.local_copies[shard.path]).st_size
        if self.remote:
            try:
                return int(self.fs.info(self._key(shard))["size"])
            except FileNotFoundError:
                return None
        st = regular_file(Path(self.root), shard.path)          # never through a link
        if isinstance(st, str):
            raise DataError(f"{self.where(shard)}: {st}")
        return None if st is None else st.st_size

    def _key(self, shard: Shard) -> str:
        from ..storage import bare, join

        return bare(join(self.root, shard.path))

    def is_local(self, shard: Shard) -> bool:
        """The shard is a file on this machine (the dataset's own, or its copy in the cache tier)."""
        return not self.remote or shard.path in self.local_copies

    def open(self, shard: Shard):
        """A binary file object of the shard (the caller closes it)."""
        if shard.path in self.local_copies:
            return open(self.local_copies[shard.path], "rb")
        if self.remote:
            return self.fs.open(self._key(shard), "rb", block_size=1 << 22)
        fd = os.open(os.path.join(self.root, shard.path), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        return os.fdopen(fd, "rb")

    def _footer(self, shard: Shard) -> None:
        size = self._size(shard)
        if size is None:
            raise DataError(f"{self.where(shard)}: missing; the manifest lists it ({shard.bytes} bytes)")
        if size != shard.bytes:
            raise DataError(f"{self.where(shard)}: {size} bytes, the manifest says {shard.bytes}: not the shard that "
                            f"was committed; run `gpuetl verify {self.root}`")
        try:
            with self.open(shard) as fh:
                meta = pq.ParquetFile(fh).metadata
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{self.where(shard)}: not a readable Parquet file ({err}); run `gpuetl verify {self.root}`") from None
        if meta.num_rows != shard.rows:
            raise DataError(f"{self.where(shard)}: its footer holds {meta.num_rows} rows, the manifest says {shard.rows}")
        shard.metadata = meta
        shard.group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        shard.group_bytes = [sum(meta.row_group(i).column(c).total_compressed_size for c in range(meta.num_columns))
                             for i in range(meta.num_row_groups)]
        schema = meta.schema.to_arrow_schema()
        if self.schema is None:
            self.schema = schema
        elif not schema.equals(self.schema):
            raise DataError(f"{self.where(shard)}: its schema differs from the split's other shards")

    def sha256(self, shard: Shard) -> None:
        """Check the shard's bytes against the manifest's sha256 (verify=True)."""
        digest = hashlib.sha256()
        with self.open(shard) as fh:
            while block := fh.read(1 << 22):
                digest.update(block)
        if digest.hexdigest() != shard.sha256:
            raise DataError(f"{self.where(shard)}: sha256 {digest.hexdigest()[:12]}…, the manifest says "
                            f"{shard.sha256[:12]}…: the shard is damaged or was replaced; run `gpuetl verify {self.root}`")

    def iter_group(self, shard: Shard, group: int, columns, rows: int):
        """The row group's columns as record batches of `rows` rows, each decoded when asked for."""
        try:
            with self.open(shard) as fh:
                yield from pq.ParquetFile(fh, metadata=shard.metadata).iter_batches(
                    batch_size=rows, row_groups=[group], columns=columns)
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{self.where(shard)}: row group {group} cannot be read ({err}); the shard is damaged; "
                            f"run `gpuetl verify {self.root}`") from None

    def read_group(self, shard: Shard, group: int, columns) -> pa.Table:
        try:
            with self.open(shard) as fh:
                return pq.ParquetFile(fh, metadata=shard.metadata).read_row_group(group, columns=columns)
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{self.where(shard)}: row group {group} cannot be read ({err}); the shard is damaged; "
                            f"run `gpuetl verify {self.root}`") from None
