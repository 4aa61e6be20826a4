"""KvikIO's arguments for s3:// objects, the record span of a ranged read of one, and the size of
KvikIO's thread pool in the worker processes gpuetl starts (gpu_worker.py). Pure Python."""

from __future__ import annotations

import re


# ---------------------------------------------------------------------------------------------
# s3:// objects read by KvikIO into device memory (issue 18): the same endpoint and credentials
# as the CPU client (storage.py: source.storage_options, else the AWS environment), or the CPU
# client where KvikIO cannot be given them.

_KVIKIO_OPTIONS = {"key", "secret", "token", "endpoint_url", "client_kwargs", "config_kwargs", "skip_instance_cache"}
_KVIKIO_CLIENT_KWARGS = {"endpoint_url", "region_name"}
_KVIKIO_CONFIG_KWARGS = {"retries"}
_URL_SAFE_KEY = re.compile(r"[A-Za-z0-9._~/!$&'()*+,;=:@-]+")     # nothing KvikIO would have to escape


def kvikio_s3_arguments(url: str, storage_options: dict | None, env) -> tuple[dict | None, str]:
    """(keyword arguments of kvikio.RemoteFile.open_s3_url, "") for an s3:// object, from the
    storage_options and AWS environment the CPU client reads; or (None, why) where KvikIO cannot
    be given what the CPU client would use (a profile, config files, an instance role, anonymous
    access, other client settings, a key that needs escaping): that object is read by the CPU client."""
    m = re.match(r"^(s3a?)://([^/]+)/(.+)$", url)
    if not m:
        return None, "not an s3:// object"
    options = dict(storage_options or {})
    client = dict(options.get("client_kwargs") or {})
    config = dict(options.get("config_kwargs") or {})
    if set(options) - _KVIKIO_OPTIONS or set(client) - _KVIKIO_CLIENT_KWARGS or set(config) - _KVIKIO_CONFIG_KWARGS:
        return None, "storage_options KvikIO cannot be given"
    explicit = bool(options.get("key") and options.get("secret"))
    if not explicit and env.get("AWS_PROFILE"):
        return None, "credentials from an AWS profile"
    key = options.get("key") or env.get("AWS_ACCESS_KEY_ID")
    secret = options.get("secret") or env.get("AWS_SECRET_ACCESS_KEY")
    if not (key and secret):
        return None, "credentials from config files or an instance role (KvikIO reads explicit keys only)"
    token = options.get("token") if explicit else env.get("AWS_SESSION_TOKEN")
    endpoint = (options.get("endpoint_url") or client.get("endpoint_url") or env.get("AWS_ENDPOINT_URL_S3")
                or env.get("AWS_ENDPOINT_URL"))
    region = client.get("region_name") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region and not endpoint:
        return None, "no region in the environment (the CPU client may read it from config files)"
    bucket, name = m.group(2), m.group(3)
    if not _URL_SAFE_KEY.fullmatch(name):
        return None, "an object key KvikIO would have to escape"
    return {"url": f"s3://{bucket}/{name}", "aws_region_name": region or "us-east-1", "aws_access_key_id": key,
            "aws_secret_access_key": secret, "aws_endpoint_url": endpoint, "aws_session_token": token or None}, ""


def remote_record_span(f, offset: int, length: int, peek: int = 1 << 16) -> tuple[int, int, int]:
    """(start, end, add_newline): the bytes of the records that start in [offset, offset+length)
    of an object in the store, by the rule of sources/ranges.py (a record belongs to the range its
    first byte is in), found with small ranged GETs pinned to the object's ETag (storage.read_span),
    so the bulk of the range can then be read straight into device memory."""
    from .. import storage

    size = f.size

    def newline_at_or_after(pos: int) -> int | None:
        step = peek
        while pos < size:
            chunk = storage.read_span(f.url, f.etag, f.version_id, pos, min(size, pos + step), f.storage_options)
            k = chunk.find(b"\n")
            if k >= 0:
                return pos + k
            pos += len(chunk)
            step *= 2
        return None

    if offset > 0:
        p = newline_at_or_after(offset - 1)
        if p is None or p + 1 >= offset + length:
            return offset, offset, 0              # no record starts in the range
        start = p + 1
    else:
        start = 0
    if start >= size:
        return start, start, 0
    q = newline_at_or_after(max(start, offset + length - 1))
    end = size if q is None else q + 1
    return start, end, int(q is None and end > start)


# ---------------------------------------------------------------------------------------------
# KvikIO's thread pool in the workers gpuetl starts (gpu_worker.dask_setup)


def kvikio_threads(cpus: int, gpus: int) -> int:
    """KvikIO's thread pool for a worker gpuetl starts: the machine's cores shared among its GPU
    workers, 4 to 64 (KvikIO splits a read into tasks of `task_size`, 4 MiB, run by the pool;
    its default pool has one thread, so a 1 GiB partition would be read by one thread)."""
    return max(4, min(64, cpus // max(1, gpus)))
