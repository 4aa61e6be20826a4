"""Object storage (s3://, gs://, az://) through fsspec: naming, listing, fetching, and errors
that name the object and never the credentials.

Credentials and the endpoint come from where the store's own client looks (for S3 the standard
AWS environment variables, AWS_ENDPOINT_URL included, and ~/.aws config files), or from
`storage_options` in the pipeline file, passed to the client as they are. Those options are
never written out: messages pass through `redact`, and manifests record object names, sizes,
ETags and version ids only."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import InputsNotFound, OutputError, OutputWriteFailed, SourceError, SpecError

# scheme -> the fsspec package that serves it
PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
            "abfss": "adlfs"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
FETCH_BATCH = 64            # objects requested together (concurrently) by one cat call
RETRIES = 3                 # botocore's attempts per call (standard mode: backoff, throttling-aware);
                            # s3fs repeats a throttled or dropped call up to 5 times more, with backoff


def scheme(path: str) -> str | None:
    m = _SCHEME.match(path) if isinstance(path, str) else None
    return m.group(1).lower() if m else None


def is_remote(path) -> bool:
    return scheme(str(path)) in PACKAGES


def local_path(path: str) -> str:
    """A plain path for `file://...` (and plain paths as they are); other schemes are refused."""
    s = scheme(path)
    if s is None:
        return path
    if s == "file":
        return path[len("file://"):]
    if s in PACKAGES:
        return path
    raise SpecError(f"{path!r}: the scheme {s}:// is not one gpuetl reads",
                    hint="use a local path, file://, s3://, gs:// or az://")


SINK_GLOB_CHARS = "*?[]"


def sink_url(url: str) -> str:
    """An object-store sink's URL in one spelling, as a local sink.path is normalised: empty and
    `.` parts dropped (`s3://b/./out//x/` is `s3://b/out/x`). A store takes every key literally,
    while gpuetl lists a dataset with patterns, so a ValueError (a located error at validate)
    refuses what would land elsewhere than named: `..` parts, the glob characters `* ? [ ]`
    (`?versionId=` is a query, not part of a key) and control characters (a trailing newline)."""
    s = scheme(url)
    rest = url[len(s) + 3:]
    control = sorted({c for c in rest if ord(c) < 0x20 or ord(c) == 0x7f})
    if control:
        raise ValueError(f"{url!r} holds the control character{'s' if len(control) > 1 else ''} "
                         f"{', '.join(repr(c) for c in control)}; an object-store sink path takes none "
                         "(a newline at the end of the value?)")
    globs = sorted({c for c in rest if c in SINK_GLOB_CHARS})
    if globs:
        query = " (a query such as ?versionId= is not part of a sink path)" if "?" in globs and "=" in rest else ""
        raise ValueError(f"{url!r} holds {' '.join(globs)}: an object-store sink path takes no glob characters "
                         f"(* ? [ ]), since gpuetl lists and replaces the dataset's keys by pattern{query}")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket: {s}://BUCKET/PREFIX")
    parts = [p for p in key.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{url!r}: '..' in an object-store sink path is not followed (a store would write it as a "
                         "literal key part); name the prefix itself")
    return f"{s}://{bucket}" + "".join("/" + p for p in parts)


# schemes that name the same store as another: s3a:// objects are s3:// ones
SAME_STORE = {"s3a": "s3", "gcs": "gs", "abfs": "az", "abfss": "az"}


def spelled(url: str) -> str:
    """A store URL with its scheme in lower case (`S3://b/k` is `s3://b/k`), as fsspec reads it;
    anything else as it is."""
    s = scheme(url)
    return f"{s}://{bare(url)}" if s in PACKAGES else url


def same_store_url(url: str) -> str:
    """One spelling per object for comparisons: the scheme in lower case, aliases as one
    (`s3a://b/k` and `S3://b/k` are `s3://b/k`)."""
    s = scheme(url)
    return f"{SAME_STORE.get(s, s)}://{bare(url)}" if s in PACKAGES else url


def inside(child: str, parent: str) -> bool:
    """Whether `child` is `parent` or lies under it, compared with a trailing '/' (out-old/ is
    not inside out) and across a scheme's spellings (s3a:// is s3://)."""
    c, p = same_store_url(child).rstrip("/"), same_store_url(parent).rstrip("/")
    return c == p or c.startswith(p + "/")


def join(url: str, rel: str) -> str:
    return url.rstrip("/") + "/" + rel


# Test hooks: {'fetched': callable(url)}, called after each object (or byte range of one) is read. Tests use them to
# change an object at an exact moment; nothing in gpuetl sets them.
HOOKS: dict = {}

# Clients by scheme, options and the environment they read credentials and endpoints from: a
# changed AWS_* variable gets a new client, an unchanged one the same (a client is slow to make).
_CLIENTS: dict = {}
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "GCS", "AZURE_")


def filesystem(url: str, storage_options: dict | None = None):
    """The fsspec file system for a URL; a missing package is an error that names it."""
    s = scheme(url)
    package = PACKAGES.get(s)
    if package is None:
        raise SpecError(f"{url!r} is not an object-store URL (s3://, gs://, az://)")
    key = (os.getpid(), s, repr(sorted((storage_options or {}).items())),      # a client is not fork-safe
           tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))))
    if key in _CLIENTS:
        return _CLIENTS[key]
    try:
        import fsspec

        options = dict(storage_options or {})
        options.setdefault("skip_instance_cache", True)      # ours are kept in _CLIENTS, below
        if package == "s3fs":
            config = dict(options.get("config_kwargs") or {})
            config.setdefault("retries", {"max_attempts": RETRIES, "mode": "standard"})
            options["config_kwargs"] = config
        fs = _CLIENTS[key] = fsspec.filesystem("s3" if s == "s3a" else s, **options)
        return fs
    except ImportError:
        raise SpecError(f"{url}: reading {s}:// needs the {package} package, which is not installed",
                        hint=f"pip install {package}") from None
    except (TypeError, ValueError) as err:
        raise SpecError(f"storage_options for {url}: {redact(str(err), storage_options)}") from None


def bare(url: str) -> str:
    """The URL without its scheme, as fsspec names objects ('bucket/key')."""
    return _SCHEME.sub("", url, count=1)


def with_scheme(url_like: str, template: str) -> str:
    """fsspec's 'bucket/key' as a URL with the scheme of `template`."""
    return f"{scheme(template)}://{url_like}"


# -- listing ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteObject:
    url: str
    size: int
    etag: str | None
    version_id: str | None
    mtime_ns: int


def _object(url: str, info: dict) -> RemoteObject:
    modified = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
    mtime_ns = int(modified.timestamp() * 1e9) if hasattr(modified, "timestamp") else 0
    etag = info.get("ETag") or info.get("etag")
    return RemoteObject(url, int(info.get("size") or 0), etag.strip('"') if isinstance(etag, str) else None,
                        info.get("VersionId") or info.get("version_id"), mtime_ns)


def list_objects(pattern: str, storage_options: dict | None = None) -> list[RemoteObject]:
    """The objects a pattern names ('**' allowed), sorted; an exact name is looked up directly."""
    pattern = spelled(pattern)
    fs = filesystem(pattern, storage_options)
    with translated(pattern, storage_options, "list"):
        fs.invalidate_cache()                     # a listing is always asked afresh
        if any(c in bare(pattern) for c in "*?["):
            # objects only: with the prefixes, a key that is also a prefix (`m/a.log` beside
            # `m/a.log/old.log`) came back as the prefix alone and was never read
            found = fs.glob(pattern, detail=True, withdirs=False)
        else:
            try:
                info = fs.info(pattern)
            except FileNotFoundError:
                return []
            found = {bare(pattern): info}
    objects = [_object(with_scheme(name, pattern), info) for name, info in found.items()
               if info.get("type", "file") == "file" and not name.endswith("/")]
    if not objects:
        bucket = bare(pattern).split("/")[0]
        with translated(pattern, storage_options, "list"):
            exists = fs.exists(bucket)
        if not exists:
            raise InputsNotFound(f"source.path: {pattern}: the bucket {bucket} does not exist",
                                 hint="check the bucket's name (and AWS_ENDPOINT_URL / the region)")
    return sorted(objects, key=lambda o: o.url)


def head(url: str, storage_options: dict | None = None) -> RemoteObject | None:
    """The object as the store has it now (None: it is gone)."""
    fs = filesystem(url, storage_options)
    with translated(url, storage_options, "read"):
        try:
            fs.invalidate_cache(bare(url))
            return _object(url, fs.info(url))
        except FileNotFoundError:
            return None


def fetch(objects: list[RemoteObject], storage_options: dict | None = None) -> Iterator[tuple[RemoteObject, bytes]]:
    """Each object's bytes, whole (what `fetch_into` does for small objects, in memory)."""
    fs = filesystem(objects[0].url, storage_options) if objects else None
    for batch in _batches(objects):
        yield from _fetch_batch(fs, batch, storage_options)


def fetch_into(objects: list[RemoteObject], destination, storage_options: dict | None = None) -> Iterator[RemoteObject]:
    """Write each object into the local file `destination(obj)` names, yielding it when done.
    Small objects are requested FETCH_BATCH at a time (fsspec runs a batch's requests
    concurrently); one over SMALL_OBJECT bytes is streamed to disk on its own, never held in
    memory. A plain-MD5 ETag is checked against the bytes: an object replaced between listing
    and reading is an error naming it, not a silent mix."""
    if not objects:
        return
    fs = filesystem(objects[0].url, storage_options)
    for batch in _batches(objects):
        if len(batch) == 1 and batch[0].size > SMALL_OBJECT:
            obj = batch[0]
            path = Path(destination(obj))
            partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
            try:
                with translated(obj.url, storage_options, "read"):
                    fs.get_file(bare(obj.url), str(partial))
                check_unchanged(obj, partial)
                os.replace(partial, path)
            finally:
                partial.unlink(missing_ok=True)
            _fetched(obj)
            yield obj
            continue
        for obj, data in _fetch_batch(fs, batch, storage_options):
            path = Path(destination(obj))
            partial = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.partial")
            partial.write_bytes(data)
            os.replace(partial, path)
            yield obj


# -- byte ranges ----------------------------------------------------------------------------------

RANGE_SCHEMES = ("s3", "s3a")     # stores whose GETs gpuetl pins to an ETag (If-Match)


def reads_ranges(obj: RemoteObject) -> bool:
    """Whether the object can be read in byte ranges pinned to the ETag it was listed with."""
    return scheme(obj.url) in RANGE_SCHEMES and bool(obj.etag) and obj.size > 0


def read_span(url: str, etag: str, version_id: str | None, start: int, end: int,
              storage_options: dict | None = None) -> bytes:
    """Bytes [start, end) of the object, in one GET the store answers only while the object still
    has `etag` (If-Match): a replaced object is an error naming it, never a mix of two versions.
    No block cache: exactly these bytes are asked for."""
    from fsspec.asyn import sync

    fs = filesystem(url, storage_options)
    bucket, key, _ = fs.split_path(url)
    pins = {"IfMatch": f'"{etag}"', **({"VersionId": version_id} if version_id else {})}

    async def get():
        resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **pins)
        try:
            return await resp["Body"].read()
        finally:
            resp["Body"].close()

    try:
        data = sync(fs.loop, get)
    except Exception as err:          # botocore, aiohttp and fsspec raise many kinds
        if error_code(err) not in ("PreconditionFailed", "412"):
            with translated(url, storage_options, "read"):
                raise
        data = None
    if data is None or len(data) != end - start:
        raise SourceError(f"source.path: {url} changed during the run (read in byte ranges pinned to ETag {etag}; "
                          f"the store no longer serves those bytes); nothing was committed",
                          hint="run again once the data stops changing, or read from a versioned bucket")
    _fetched_url(url)
    return data


SMALL_OBJECT = 8 << 20          # bytes: larger objects are streamed to disk one at a time
BATCH_BYTES = 256 << 20         # bytes of small objects held in memory at once


def _batches(objects: list[RemoteObject]) -> Iterator[list[RemoteObject]]:
    batch: list[RemoteObject] = []
    held = 0
    for obj in objects:
        if obj.size > SMALL_OBJECT:
            yield [obj]
            continue
        if batch and (len(batch) == FETCH_BATCH or held + obj.size > BATCH_BYTES):
            yield batch
            batch, held = [], 0
        batch.append(obj)
        held += obj.size
    if batch:
        yield batch


def _fetch_batch(fs, batch: list[RemoteObject], storage_options) -> Iterator[tuple[RemoteObject, bytes]]:
    names = [bare(o.url) for o in batch]
    with translated(batch[0].url if len(batch) == 1 else f"{len(batch)} objects from {batch[0].url}",
                    storage_options, "read"):
        got = fs.cat(names, on_error="return")
    for obj, name in zip(batch, names):
        data = got.get(name)
        if isinstance(data, BaseException):
            with translated(obj.url, storage_options, "read"):
                raise data
        check_unchanged(obj, data)
        _fetched(obj)
        yield obj, data


def _fetched(obj: RemoteObject) -> None:
    _fetched_url(obj.url)


def _fetched_url(url: str) -> None:
    if "fetched" in HOOKS:
        HOOKS["fetched"](url)


_MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")


def check_unchanged(obj: RemoteObject, data: bytes | Path) -> None:
    """The bytes read (or the file they were written to) are the object listed: its size, and its
    MD5 where the ETag is one (not for multipart uploads or encrypted objects)."""
    if isinstance(data, Path):
        size = data.stat().st_size
        digest = hashlib.md5(usedforsecurity=False)
        if size == obj.size and obj.etag and _MD5_ETAG.match(obj.etag):
            with open(data, "rb") as fh:
                while block := fh.read(8 << 20):
                    digest.update(block)
    else:
        size, digest = len(data), hashlib.md5(data, usedforsecurity=False)
    if size != obj.size or (obj.etag and _MD5_ETAG.match(obj.etag) and digest.hexdigest() != obj.etag):
        raise SourceError(f"{obj.url}: the object changed while gpuetl read it (listed as {obj.size} bytes, "
                          f"ETag {obj.etag}; read {size} bytes that do not match)",
                          hint="run again once the data stops changing, or pin the inputs (a versioned bucket)")


# -- errors -------------------------------------------------------------------------------------

def redact(text: str, storage_options: dict | None) -> str:
    """`text` with every string value of storage_options (keys, secrets, tokens) blotted out."""
    for value in _strings(storage_options):
        if len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def error_code(err: BaseException) -> str:
    """The store's error code (AccessDenied, NoSuchBucket, SlowDown, ...) where one is known."""
    for e in (err, err.__cause__, err.__context__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            return str(response.get("Error", {}).get("Code", ""))
    return ""


@contextmanager
def translated(url: str, storage_options: dict | None, action: str, *, output: bool = False):
    """Store errors as gpuetl errors naming the object and saying what to do: no credentials,
    no bucket, access denied, a request that kept failing after its retries."""
    error = OutputWriteFailed if output else SourceError
    where = "sink.path" if output else "source.path"
    try:
        yield
    except (SourceError, SpecError, OutputError):
        raise
    except Exception as err:          # botocore, aiohttp and fsspec raise many kinds
        name = type(err).__name__
        text = redact(str(err), storage_options)
        code = error_code(err)
        if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError") \
                or code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            raise error(f"{where}: {url}: no usable credentials for the object store ({name if not code else code})",
                        hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, ~/.aws/credentials), "
                             "or give storage_options in the pipeline file") from None
        if isinstance(err, PermissionError) or code in ("AccessDenied", "403", "AllAccessDisabled"):
            raise error(f"{where}: {url}: access denied ({action})",
                        hint="check the credentials' permissions on this bucket and key") from None
        if code == "NoSuchBucket" or "bucket does not exist" in text.lower():
            raise (OutputError if output else InputsNotFound)(f"{where}: {url}: the bucket does not exist",
                        hint="check the bucket's name (and AWS_ENDPOINT_URL / the region)") from None
        if isinstance(err, FileNotFoundError) or code in ("NoSuchKey", "404"):
            raise error(f"{where}: {url}: no such object (it was removed after it was listed?)",
                        hint="run again once the data stops changing") from None
        if code in ("PreconditionFailed", "412"):
            raise error(f"{where}: {url}: the object changed while gpuetl read it",
                        hint="run again once the data stops changing") from None
        raise error(f"{where}: {url}: the object store failed to {action} it, retries included "
                    f"({code or name}: {text[:300]})",
                    hint="check the endpoint and the network; throttled requests are retried with backoff, "
                         "then the run stops with nothing committed") from None
