"""s3:// objects on the GPU backend: KvikIO is given the CPU client's endpoint and credentials or
not used at all (gpu_kvikio.kvikio_s3_arguments), and the record boundaries of a byte range of an
object are found by the rule of sources/ranges.py with small pinned GETs
(gpu_kvikio.remote_record_span), so the range's bulk can go straight into device memory.
Against the S3 server on loopback (tests/objectstore_server.py). The KvikIO open runs where
RAPIDS imports (gpu_api tier); the read itself needs a GPU (tests/backends/test_gpu_records.py's
neighbours in `pytest -m gpu`)."""

from __future__ import annotations

import os

import pytest

from gpuetl.backends.gpu_kvikio import kvikio_s3_arguments, remote_record_span
from gpuetl.sources.files import InputFile

ENV = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_DEFAULT_REGION": "eu-west-1"}


def test_kvikio_gets_the_environment_the_cpu_client_reads():
    args, why = kvikio_s3_arguments("s3://bucket/logs/a.log", None, {**ENV, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert why == "" and args == {"url": "s3://bucket/logs/a.log", "aws_region_name": "eu-west-1",
                                  "aws_access_key_id": "AK", "aws_secret_access_key": "SK",
                                  "aws_endpoint_url": "http://127.0.0.1:9", "aws_session_token": None}
    assert kvikio_s3_arguments("s3a://bucket/a", None, ENV)[0]["url"] == "s3://bucket/a"


def test_storage_options_win_over_the_environment():
    options = {"key": "k2", "secret": "s2", "token": "t2", "client_kwargs": {"endpoint_url": "http://h:1",
                                                                            "region_name": "us-west-2"}}
    args, _ = kvikio_s3_arguments("s3://b/k", options, {**ENV, "AWS_SESSION_TOKEN": "env-token"})
    assert (args["aws_access_key_id"], args["aws_secret_access_key"], args["aws_session_token"]) == ("k2", "s2", "t2")
    assert (args["aws_endpoint_url"], args["aws_region_name"]) == ("http://h:1", "us-west-2")


@pytest.mark.parametrize("options, env, reason", [
    (None, {"AWS_PROFILE": "dev", "AWS_DEFAULT_REGION": "x"}, "profile"),
    (None, {"AWS_DEFAULT_REGION": "x"}, "config files or an instance role"),
    ({"anon": True}, ENV, "storage_options"),
    ({"requester_pays": True}, ENV, "storage_options"),
    ({"client_kwargs": {"verify": False}}, ENV, "storage_options"),
    ({"config_kwargs": {"signature_version": "s3v2"}}, ENV, "storage_options"),
    (None, {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}, "no region"),
])
def test_what_only_the_cpu_client_can_use_keeps_the_object_on_it(options, env, reason):
    args, why = kvikio_s3_arguments("s3://bucket/key", options, env)
    assert args is None and reason in why


def test_keys_kvikio_would_have_to_escape_stay_on_the_cpu_client():
    assert kvikio_s3_arguments("s3://b/with space.log", None, ENV)[0] is None
    assert kvikio_s3_arguments("s3://b/ünï.log", None, ENV)[0] is None
    assert kvikio_s3_arguments("s3://b/a/b-c_d.e~f.log", None, ENV)[0] is not None
    assert kvikio_s3_arguments("gs://b/a", None, ENV)[0] is None


def _object(s3, name: str, data: bytes) -> InputFile:
    s3.put(name, data)
    info = s3.fs.info(f"{s3.bucket}/{name}")
    return InputFile(0, s3.url(name), name, len(data), 0, None, s3.url(name), info["ETag"].strip('"'),
                     info.get("VersionId"), in_store=True)


@pytest.mark.slow
@pytest.mark.parametrize("data", [b"a\nbb\n\nccc\n" + b"x" * 300 + b"\nlast without newline",
                                  b"one line only", b"\n\n\n", b"y" * 50 + b"\n"])
def test_remote_record_spans_follow_the_local_files_rule(s3, tmp_path, data):
    """The same (start, end, add a newline) as sources/ranges.record_span on a local copy, for
    ranges that cut records, hold none, or run past the end (peeks of 5 bytes, doubling)."""
    from gpuetl.sources.ranges import record_span

    f = _object(s3, "in/a.log", data)
    local = tmp_path / "a.log"
    local.write_bytes(data)
    for length in (1, 7, len(data)):
        for offset in sorted({0, 1, len(data) // 3, len(data) // 2, len(data) - 2, len(data) - 1}):
            if offset >= 0:
                assert remote_record_span(f, offset, length, peek=5) == record_span(str(local), offset, length), \
                    (offset, length)


def test_a_quick_remote_record_span(s3, tmp_path):
    from gpuetl.sources.ranges import record_span

    data = b"ab\ncd\nef"
    f = _object(s3, "in/q.log", data)
    (tmp_path / "q.log").write_bytes(data)
    for offset, length in ((0, 2), (1, 3), (4, 5)):
        assert remote_record_span(f, offset, length, peek=2) == record_span(str(tmp_path / "q.log"), offset, length)


def test_a_replaced_object_is_never_read_half_old(s3):
    from gpuetl.errors import SourceError

    f = _object(s3, "in/b.log", b"a\nb\nc\n" * 100)
    s3.put("in/b.log", b"changed\n" * 100)
    with pytest.raises(SourceError, match="changed during the run"):
        remote_record_span(f, 10, 20)


@pytest.mark.gpu_api
def test_kvikio_opens_the_object_with_those_arguments(s3):
    """On RAPIDS without a GPU: KvikIO asks the loopback server for the object's size with the
    arguments gpuetl gives it (endpoint, region, keys, the URL of the key), as a read would."""
    try:
        os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
        from kvikio import RemoteFile
        from kvikio.remote_file import is_remote_file_available
    except ImportError as err:
        pytest.skip(f"KvikIO does not import here ({err})")
    if not is_remote_file_available():
        pytest.skip("this KvikIO build has no remote support")
    f = _object(s3, "in/dir/c-d_e.log", b"z" * 1234)
    args, why = kvikio_s3_arguments(f.url, None, os.environ)
    assert args is not None, why
    args = dict(args)
    remote = RemoteFile.open_s3_url(args.pop("url"), None, **args)
    try:
        assert remote.nbytes() == 1234
    finally:
        remote.close()


@pytest.mark.gpu
def test_an_s3_text_source_is_read_by_kvikio_into_device_memory(s3, tmp_path):
    """On a GPU: ranges of an s3:// object go through KvikIO (counted under its own read path),
    with the CPU backend's rows, and nothing handed to the CPU client."""
    import gpuetl
    from gpuetl.samples import write_access_logs

    write_access_logs(tmp_path / "a.log", lines=2000)
    s3.put("logs/a.log", (tmp_path / "a.log").read_bytes())
    spec = {"version": 1, "name": "t", "source": {"type": "text", "path": s3.url("logs/*.log"), "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "sink": {"path": "out", "mode": "overwrite"}}
    runs = {}
    for backend in ("cpu", "gpu"):
        spec["sink"]["path"] = f"out-{backend}"
        result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend=backend, scheduler="sync")
        import pyarrow.parquet as pq

        runs[backend] = ([r for s in result.shards for r in pq.read_table(result.out_dir / s["path"]).to_pylist()],
                         result.manifest)
    assert runs["gpu"][0] == runs["cpu"][0]
    manifest = runs["gpu"][1]
    assert manifest["fallbacks"] == {}
    assert manifest["host_transfer"]["reads"]["kvikio remote (s3)"]["bytes"] > 0
