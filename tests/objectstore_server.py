"""An S3 API server on loopback for the object-storage tests: moto's standalone server, started
once per test session (as s3fs's own tests do), and a fresh bucket per test."""

from __future__ import annotations

import itertools
import os

import pytest

_buckets = itertools.count()


@pytest.fixture(scope="session")
def s3_endpoint():
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    import s3fs

    endpoint = f"http://{host}:{port}"
    yield endpoint, s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs={"endpoint_url": endpoint},
                                      skip_instance_cache=True)
    server.stop()


class Store:
    """A bucket of the loopback server, and a client to arrange and look at it."""

    def __init__(self, endpoint: str, fs, bucket: str):
        self.endpoint, self.fs, self.bucket = endpoint, fs, bucket
        self.fs.mkdir(bucket)

    def url(self, rel: str = "") -> str:
        return f"s3://{self.bucket}/{rel}"

    def put(self, rel: str, data: bytes) -> None:
        self.fs.pipe_file(f"{self.bucket}/{rel}", data)

    def get(self, rel: str) -> bytes:
        self.fs.invalidate_cache()
        return self.fs.cat_file(f"{self.bucket}/{rel}")

    def keys(self, prefix: str = "") -> list[str]:
        self.fs.invalidate_cache()
        base = f"{self.bucket}/"
        return sorted(k[len(base):] for k in self.fs.find(base + prefix))


AWS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
           "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION")


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """A fresh bucket; the AWS environment points at the loopback server (no config files read)."""
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint[0])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))        # the sink's local staging, per test
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)            # re-read TMPDIR
    return Store(*s3_endpoint, f"gpuetl-test-{os.getpid()}-{next(_buckets)}")
