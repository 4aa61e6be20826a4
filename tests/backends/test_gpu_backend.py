"""Every Backend method on the GPU against the CPU backend on the same inputs (same values), and
the device-only parts: the shard writer's row groups, the host-transfer ledger, the per-read
KvikIO path, the cluster. Where the device path is expected the fallback counters must stay
zero, so a silent fall back to the CPU fails. Needs cuDF and a GPU: `pytest -m gpu`."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

cudf = pytest.importorskip("cudf")
cp = pytest.importorskip("cupy")

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.backends.gpu import GpuBackend  # noqa: E402
from gpuetl.backends.gpu_tallies import fallback_counts, reset_fallbacks, reset_tallies, worker_tallies  # noqa: E402
from gpuetl.hashing import hash_columns  # noqa: E402
from gpuetl.parsing import preset  # noqa: E402
from gpuetl.samples import write_access_logs  # noqa: E402
from gpuetl.sources.files import resolve_inputs  # noqa: E402
from gpuetl.sources.ranges import plan_partitions  # noqa: E402

pytestmark = pytest.mark.gpu
CPU, GPU = CpuBackend(), None


@pytest.fixture(scope="module")
def gpu():
    return GpuBackend()


@pytest.fixture
def on_device():
    """Zero the tallies; after the test, assert nothing was handed to the CPU kernels."""
    reset_tallies()
    yield
    assert fallback_counts() == {}, "the device path fell back to the CPU"


def host(values):
    if isinstance(values, cp.ndarray):
        return cp.asnumpy(values).tolist()
    if isinstance(values, cudf.Series):
        return values.to_arrow().to_pylist()
    if hasattr(values, "array"):
        return pa.array(values).to_pylist()
    return np.asarray(values).tolist()


STRINGS = ["a", "", None, "héllo", "x" * 40, "tab\there"]
TYPED = {"bool": [True, None, False], "int8": [-128, None, 127], "uint64": [0, None, 2**64 - 1],
         "int64": [-(2**63), 5, None], "float32": [1.5, None, -0.0], "float64": [0.1, float("inf"), None],
         "string": STRINGS, "timestamp": [0, None, 1_700_000_000_123_456]}


@pytest.mark.parametrize("t", sorted(TYPED))
def test_series_nulls_to_arrow_from_arrow(gpu, t):
    arr = pa.array(TYPED[t], type=pa.timestamp("us", tz="UTC") if t == "timestamp" else None)
    arr = arr.cast({"timestamp": pa.timestamp("us", tz="UTC")}.get(t, arr.type))
    g = gpu.series(arr, t)
    assert g.dtype == gpu.dtype(t)
    schema = {"c": t}
    assert gpu.to_arrow(cudf.DataFrame({"c": g}), schema).equals(CPU.to_arrow(CPU.xd.DataFrame({"c": CPU.series(arr, t)}), schema))
    assert host(gpu.nulls(3, t)) == [None] * 3
    back = gpu.from_arrow(pa.table({"c": arr}))
    assert host(back["c"]) == host(CPU.from_arrow(pa.table({"c": arr}))["c"])
    assert host(gpu.concat([cudf.DataFrame({"c": g}), cudf.DataFrame({"c": g})])["c"]) == arr.to_pylist() * 2


@pytest.mark.parametrize("t", sorted(TYPED))
def test_hash_primitives_match(gpu, t):
    arr = pa.array(TYPED[t]).cast({"timestamp": pa.timestamp("us", tz="UTC")}.get(t, pa.array(TYPED[t]).type))
    g, c = gpu.series(arr, t), CPU.series(arr, t)
    assert host(hash_columns(gpu, [g], 3)) == host(hash_columns(CPU, [c], 3))
    if t == "string":
        go, gd, gv = gpu.string_buffers(g)
        co, cd, cv = CPU.string_buffers(c)
        starts_g, starts_c = host(go), co.tolist()
        assert host(gv) == cv.tolist()
        assert [bytes(host(gd)[a:b]) for a, b in zip(starts_g[:-1], starts_g[1:])] == \
               [bytes(cd[a:b].tolist()) for a, b in zip(starts_c[:-1], starts_c[1:])]
    else:
        gv, gm = gpu.fixed_width(g)
        cv, cm = CPU.fixed_width(c)
        assert host(gm) == cm.tolist()
        assert [v for v, m in zip(host(gv), cm) if m] == [v for v, m in zip(cv.tolist(), cm) if m]


def test_astype_exact(gpu):
    g = gpu.series([1, None, 300], "int64")
    assert host(gpu.astype(g, "int32")) == [1, None, 300]
    with pytest.raises(Exception):
        gpu.astype(g, "int8")
    assert host(gpu.astype(g, "string")) == host(CPU.astype(CPU.series([1, None, 300], "int64"), "string"))


def test_crlf_with_valid_utf8_stays_on_the_device(gpu, on_device):
    data = "GET /é 200\r\nPOST /ü 404\r\n\r\n日本語 ok\r\nlast\r".encode()
    g, c = gpu.split_lines(data, 0), CPU.split_lines(data, 0)
    assert host(g.text) == host(c.text) == ["GET /é 200", "POST /ü 404", "日本語 ok", "last\r"]   # no '\n': kept
    assert host(g.offsets) == c.offsets.tolist() and not any(host(g.bad_utf8))
    assert "invalid UTF-8 lines" not in worker_tallies()["host_bytes"]


def test_invalid_utf8_lines_alone_cross_to_the_host(gpu):
    reset_tallies()
    good = "ok é line\n".encode() * 1000
    data = good + b"bad \xff\xfe line\r\n" + good
    g, c = gpu.split_lines(data, 0), CPU.split_lines(data, 0)
    assert host(g.text) == host(c.text) and host(g.bad_utf8) == c.bad_utf8.tolist()
    # the quarantine's _raw: the exact bytes, less the line ending, null for valid lines
    raw = gpu.to_arrow(cudf.DataFrame({"r": g.raw}), {"r": "binary"}).column("r").to_pylist()
    assert raw == c.raw.tolist() and b"bad \xff\xfe line" in raw
    moved = worker_tallies()["host_bytes"]["invalid UTF-8 lines"]
    assert 0 < moved < 200                     # one line's bytes, bounds and row, not the block
    assert fallback_counts() == {"split_lines: invalid UTF-8 lines decoded on the host": 1}


def test_split_lines(gpu, tmp_path):
    data = b"a\r\n\nb\xff\xfec\n\r\n" + "é\n".encode() + b"last"
    for buf in (data, b"plain\nascii\n\n", b"", b"a\r\r\n\xff\r\r\nx\ry\r\n\r\r\nend\r"):
        g, c = gpu.split_lines(buf, 7), CPU.split_lines(buf, 7)
        assert host(g.text) == host(c.text)
        assert host(g.offsets) == c.offsets.tolist() and host(g.bad_utf8) == c.bad_utf8.tolist()


def test_read_block_matches_host_reader(gpu, tmp_path):
    from gpuetl.sources.ranges import read_block

    write_access_logs(tmp_path / "a.log", lines=3000, seed=4, bad_every=50)
    (tmp_path / "b.log").write_bytes(b"no newline at end")
    write_access_logs(tmp_path / "c.log.gz", lines=200, seed=5, gzip=True)
    files = resolve_inputs(["*"], tmp_path, "infer")
    for blocksize in (1000, 4096, 1 << 20):
        for part in plan_partitions(files, blocksize):
            g, c = gpu.read_block(files, part.ranges), read_block(files, part.ranges)
            assert bytes(cp.asnumpy(g.data)) == c.data
            assert (g.seg_pos, g.seg_start, g.seg_file, g.extra_bad, g.added) == \
                (c.seg_pos, c.seg_start, c.seg_file, c.extra_bad, c.added)
            # the same ranges pinned; KvikIO's reads into device memory without a hash (sources/pins.py)
            assert [p[:3] for p in g.pins] == [p[:3] for p in c.pins]
            assert all(gp.digest in (None, hp.digest) for gp, hp in zip(g.pins, c.pins))
            assert all(gp.digest is not None for gp in g.pins if files[gp.file_index].compression)   # host bytes


@pytest.mark.parametrize("name", ["apache_combined", "apache_common", "syslog_rfc3164", "syslog_rfc5424"])
def test_extract_presets(gpu, tmp_path, name):
    write_access_logs(tmp_path / "a.log", lines=3000, seed=4, bad_every=37)
    lines = (tmp_path / "a.log").read_text().splitlines() + ['::1 - - [t] "-" 400 - "-" "-"', "", "x"]
    rule = preset(name)
    kernel = {"apache_combined": "combined", "apache_common": "clf"}.get(name)
    for k in (kernel, None):
        gc, gm = gpu.extract(gpu.series(lines, "string"), rule.regex, tuple(rule.columns), kernel=k)
        cc, cm = CPU.extract(CPU.series(lines, "string"), rule.regex, tuple(rule.columns), kernel=k)
        assert host(gm) == host(cm)
        for col in rule.columns:
            assert host(gc[col]) == host(cc[col]), col


def test_extract_fallback_is_counted(gpu):
    reset_fallbacks()
    lines = ["Abc 1", "abc 2", "zzz"]
    gc, gm = gpu.extract(gpu.series(lines, "string"), r"(?i)^(?P<w>abc) (?P<n>\d)", ("w", "n"))
    cc, cm = CPU.extract(CPU.series(lines, "string"), r"(?i)^(?P<w>abc) (?P<n>\d)", ("w", "n"))
    assert host(gc["w"]) == host(cc["w"]) and host(gm) == host(cm)
    assert any(k.startswith("regex:") for k in fallback_counts())


CASTS = [
    ("int16", None, [" 12 ", "+7", "-32768", "32768", "x", "", None, "1e3", "٣", "99999999999999999999"]),
    ("uint64", None, ["18446744073709551615", "18446744073709551616", "-0", "+5", None]),
    ("float64", None, ["1.5", "-0", ".5", "5.", "0.1", "123456789012345678", "1e10", "nan", "inf", "x", None]),
    ("float32", None, ["0.1", "3.4e38", "x"]),
    ("bool", None, ["true", " YES ", "0", "maybe", "", None, "\u212a"]),
    ("timestamp", "%d/%b/%Y:%H:%M:%S %z", ["10/Oct/2000:13:55:36 -0700", "31/Apr/2000:00:00:00 +0000", "x", None,
                                          "10/oct/2000:13:55:36 -0700", "10/Oct/2000:13:55:36  -0700"]),
    ("timestamp", None, ["2026-03-29T02:30:00Z", "2026-03-29 02:30", "2026-03-29", "1500-01-01", "bad", None]),
]


@pytest.mark.parametrize("t, fmt, values", CASTS)
@pytest.mark.parametrize("tz", [None, "Europe/Paris"])
def test_cast_matches_cpu(gpu, t, fmt, values, tz):
    gv, gb = gpu.cast(gpu.series(values, "string"), t, fmt=fmt, timezone=tz)
    cv, cb = CPU.cast(CPU.series(values, "string"), t, fmt=fmt, timezone=tz)
    assert gpu.to_arrow(cudf.DataFrame({"c": gv}), {"c": t}).equals(CPU.to_arrow(CPU.xd.DataFrame({"c": cv}), {"c": t}))
    assert host(gb) == host(cb)


def test_parse_json_and_csv(gpu):
    from gpuetl.sources.json_fields import JsonColumn, JsonRead, parse_path

    lines = ['{"a": 1, "b": "x", "u": {"id": "7"}, "t": ["p"], "g": {"lat": 1.5}}', '{"a": 1.5}', "nope",
             '{"b": 2, "u": {"id": 3}, "t": [], "g": null}']
    declared = {"a": "int64", "b": "string", "u.id": "int64", "t": "list<string>", "g": "struct<lat: float64>"}
    read = JsonRead(tuple(JsonColumn(n, t, parse_path(n)) for n, t in declared.items()))
    gc, gok, gr = gpu.parse_json(gpu.series(lines, "string"), read)
    cc, cok, cr = CPU.parse_json(CPU.series(lines, "string"), read)
    assert host(gok) == host(cok) and all(host(gc[n]) == host(cc[n]) for n in declared)
    assert host(gc["t"]) == [["p"], None, None, []] and host(gc["u.id"]) == [7, None, None, 3]
    lines = ['a,b', '"x,y",2', 'only']
    gc, gok, _ = gpu.parse_csv(gpu.series(lines, "string"), ("p", "q"), ",")
    cc, cok, _ = CPU.parse_csv(CPU.series(lines, "string"), ("p", "q"), ",")
    assert host(gok) == host(cok) and host(gc["p"]) == host(cc["p"])
    mixed = ['a,b', '"open,2', 'only']          # two different reasons: one per record, on the device
    gc, gok, gr = gpu.parse_csv(gpu.series(mixed, "string"), ("p", "q"), ",")
    cc, cok, cr = CPU.parse_csv(CPU.series(mixed, "string"), ("p", "q"), ",")
    assert isinstance(gr, cudf.Series) and host(gr) == host(cr)


def test_io_path_and_versions(gpu):
    assert gpu.io_path().startswith(("kvikio", "posix"))
    assert "cudf" in gpu.versions()


def test_local_cuda_cluster_takes_a_free_dashboard_port(gpu):
    with gpu.local_cluster(quiet=True, dashboard_address=None) as cluster:
        assert not cluster.dashboard_link.rstrip("/").endswith((":8787", ":8787/status"))


def test_integer_conversions_refuse_signed_unsigned_wrap(gpu):
    with pytest.raises(ValueError):
        gpu.astype(gpu.series([-1, 5], "int64"), "uint64")          # a round trip gives -1 back
    with pytest.raises(ValueError):
        gpu.astype(gpu.series([2**63], "uint64"), "int64")
    with pytest.raises(ValueError):
        gpu.astype(gpu.series([1.5], "float64"), "int32")
    assert host(gpu.astype(gpu.series([0, None, 255], "int64"), "uint8")) == [0, None, 255]
    assert host(gpu.astype(gpu.series([2.0, None], "float64"), "int8")) == [2, None]


def test_provenance_file_names_on_the_device(gpu, tmp_path, on_device):
    from gpuetl import Pipeline

    write_access_logs(tmp_path / "a.log", lines=300, seed=1)
    write_access_logs(tmp_path / "b.log", lines=300, seed=2)
    spec = {"version": 1, "name": "p", "source": {"type": "text", "path": "*.log", "blocksize": "8KiB",
                                                  "provenance": True},
            "parse": {"preset": "apache_combined"}, "sink": {"path": "out", "mode": "overwrite"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="gpu", scheduler="sync")
    table = pa.concat_tables([pq.read_table(tmp_path / "out" / s["path"]) for s in result.shards])
    assert sorted(set(table.column("_file").to_pylist())) == ["a.log", "b.log"]


def test_minhash_null_rows_and_nfkc_on_the_device(gpu):
    a = np.arange(1, 5, dtype=np.uint32)
    b = np.arange(7, 11, dtype=np.uint32)
    col = gpu.series(["hello world", None, "", "abcdefgh"], "string")
    sig, valid = gpu.minhash(col, seed=3, a=a, b=b, width=3)
    csig, cvalid = CPU.minhash(CPU.series(["hello world", None, "", "abcdefgh"], "string"), seed=3, a=a, b=b, width=3)
    assert host(valid) == cvalid.tolist()
    assert [r for r, v in zip(host(sig), cvalid) if v] == [r for r, v in zip(csig.tolist(), cvalid) if v]
    reset_tallies()
    text = ["ﬁne ＡＢＣ", "plain", None]
    g = gpu.normalize_text(gpu.series(text, "string"), nfkc=True, lower=False, collapse_whitespace=False, strip=False)
    c = CPU.normalize_text(CPU.series(text, "string"), nfkc=True, lower=False, collapse_whitespace=False, strip=False)
    assert host(g) == host(c) == ["fine ABC", "plain", None]
    assert worker_tallies()["host_bytes"].get("normalize_text: non-ASCII rows (NFKC)", 0) > 0


def test_shard_writer_cuts_row_groups_at_fixed_counts_however_rows_arrive(gpu, tmp_path):
    from gpuetl.sinks.parquet import ParquetSink, ShardTask, WriteOptions

    schema = {"k": "int64", "s": "string", "t": "timestamp"}
    n = 2500
    frame = cudf.DataFrame({"k": cp.arange(n, dtype=cp.int64), "s": cudf.Series([f"v{i % 7}" for i in range(n)]),
                            "t": gpu.series(cp.arange(n, dtype=cp.int64) * 1_000_000, "int64").astype("datetime64[us]")
                            .dt.tz_localize("UTC")})
    options = WriteOptions("zstd", 1000, None)
    digests = []
    for cuts in ([n], [1, 999, 1000, 500], [700, 700, 700, 400]):
        writer = ParquetSink().shard_writer(gpu, str(tmp_path / f"{len(cuts)}" / "part-00000.parquet"), schema,
                                            options, ShardTask(0, "", 0, 0, 0, "part-00000.parquet"))
        at = 0
        for size in cuts:
            writer.write(frame.iloc[at:at + size])
            at += size
        result = writer.close()
        meta = pq.ParquetFile(tmp_path / f"{len(cuts)}" / "part-00000.parquet").metadata
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 500]
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert result.rows == n
        digests.append(result.sha256)
    assert len(set(digests)) == 1
    table = pq.read_table(tmp_path / "1" / "part-00000.parquet")
    from gpuetl.types import arrow_schema

    assert table.schema.remove_metadata() == arrow_schema(schema)      # the CPU's Arrow schema, nullable
    assert table.column("k").to_pylist() == list(range(n))


def test_kvikio_reads_are_counted_by_the_path_taken(gpu, tmp_path):
    write_access_logs(tmp_path / "a.log", lines=2000, seed=4)
    files = resolve_inputs(["*"], tmp_path, "infer")
    reset_tallies()
    total = 0
    for part in plan_partitions(files, 1 << 14):
        block = gpu.read_block(files, part.ranges)
        total += len(block.data)
    reads = worker_tallies()["reads"]
    by_path = {k: v for k, v in reads.items() if k.startswith("kvikio") and k.endswith("bytes")}
    assert set(by_path) <= {"kvikio gds bytes", "kvikio posix bytes"}, reads
    assert sum(by_path.values()) >= total - len(list(plan_partitions(files, 1 << 14)))   # added newlines


@pytest.mark.slow
def test_local_cuda_cluster_smoke(tmp_path):
    """Two partitions through the real dask-cuda cluster with its RMM pool: counts, fallbacks
    zero, the host-transfer report gathered from the workers."""
    from gpuetl import Pipeline

    write_access_logs(tmp_path / "a.log", lines=4000, seed=9, bad_every=100)
    size = (tmp_path / "a.log").stat().st_size
    spec = {"version": 1, "name": "c", "source": {"type": "text", "path": "a.log", "blocksize": size // 2 + 1},
            "parse": {"preset": "apache_combined"}, "sink": {"path": "out", "mode": "overwrite"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="gpu", scheduler="local")
    expected = Pipeline.from_dict(spec | {"sink": {"path": "cpu", "mode": "overwrite"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")
    assert result.counts == expected.counts and result.counts["rows_in"] == 4000
    assert result.manifest["fallbacks"] == {}
    moved = result.manifest["host_transfer"]
    assert sum(r["reads"] for p, r in moved["reads"].items() if p.startswith("kvikio")) >= 2
    assert moved["input_bytes"] == size


def test_separate_matches_the_cpu(gpu):
    from gpuetl.backends.base import COUNT, STAGE, STATUS

    status, stage, count = [0, 2, 1, 0, 3, 2, 0], [-1, 1, 0, -1, 2, 1, -1], [1, 1, 1, 1, 4, 2, 1]
    frames = {b: b.xd.DataFrame({"v": b.series(list(range(7)), "int64"), STATUS: b.series(status, "int8"),
                                 STAGE: b.series(stage, "int16"), COUNT: b.series(count, "int64")})
              for b in (gpu, CPU)}
    g_live, g_bad, g_tallies = gpu.separate(frames[gpu])
    c_live, c_bad, c_tallies = CPU.separate(frames[CPU])
    assert g_tallies == c_tallies == {(1, 2): 3, (2, 3): 4}
    assert host(g_live["v"]) == host(c_live["v"]) == [0, 3, 6]
    assert host(g_bad["v"]) == host(c_bad["v"]) == [2]


def test_streamed_run_in_process_keeps_rows_on_the_device(gpu, tmp_path, on_device):
    """scheduler=sync streams partitions to the shard writer in this process: the rows stay on
    the device from the read to libcudf's encoder; what crosses is bookkeeping (< 1%)."""
    from gpuetl import Pipeline

    write_access_logs(tmp_path / "a.log", lines=20_000, seed=3)
    spec = {"version": 1, "name": "s", "source": {"type": "text", "path": "a.log", "blocksize": "256KiB"},
            "parse": {"preset": "apache_combined"},
            "columns": {"status": "int16", "size": "int64", "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}},
            "sink": {"path": "out", "mode": "overwrite"}}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="gpu", scheduler="sync")
    moved = result.manifest["host_transfer"]
    assert "to_arrow: frame to host Arrow" not in moved["by_reason"], moved
    assert moved["host_bytes_per_input_byte"] < 0.01, moved
    cpu = Pipeline.from_dict(spec | {"sink": {"path": "cpu", "mode": "overwrite"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")
    assert pq.read_table(tmp_path / "out" / result.shards[0]["path"]).equals(
        pq.read_table(tmp_path / "cpu" / cpu.shards[0]["path"]))


def test_mask_patterns_go_through_the_dialect(gpu):
    """\\d is ASCII in RE2 (the CPU's engine) and Unicode in libcudf: translated, the Arabic-Indic
    digit stays; a pattern libcudf cannot run is replaced on the host, counted."""
    values = ["call 555-1234", "٣٣٣-٣٣٣٣", None, "end$"]
    reset_tallies()
    g = gpu.replace_regex(gpu.series(values, "string"), r"\d{3}-\d{4}", "<PHONE>")
    c = CPU.replace_regex(CPU.series(values, "string"), r"\d{3}-\d{4}", "<PHONE>")
    assert host(g) == host(c) == ["call <PHONE>", "٣٣٣-٣٣٣٣", None, "end$"]
    assert fallback_counts() == {}
    g = gpu.replace_regex(gpu.series(values, "string"), r"(?i)CALL", "x")
    c = CPU.replace_regex(CPU.series(values, "string"), r"(?i)CALL", "x")
    assert host(g) == host(c) and list(fallback_counts()) == ["mask regex: inline flags, lookarounds or other (?...) groups"]


def test_matches_patterns_go_through_the_dialect(gpu):
    values = ["line\n", "٣", "7", None]
    reset_tallies()
    for pattern in (r"^\d$", r"e$"):
        assert host(gpu.contains_regex(gpu.series(values, "string"), pattern)) == \
               host(CPU.contains_regex(CPU.series(values, "string"), pattern))
    assert fallback_counts() == {}
    assert host(gpu.contains_regex(gpu.series(values, "string"), r"(?i)LINE")) == [True, False, False, None]
    assert list(fallback_counts()) == ["matches regex: inline flags, lookarounds or other (?...) groups"]


# -- defects found by reading the GPU code (docs/gpu.md, "Found by reading") ------------------

def test_binary_columns_are_binary_in_the_shard(gpu, tmp_path):
    """libcudf writes a binary column unannotated (set_output_as_binary), not as UTF8 text."""
    from gpuetl.sinks.parquet import ParquetSink, ShardTask, WriteOptions
    from gpuetl.types import arrow_schema

    schema = {"k": "int64", "image": "binary"}
    raw = [b"\xff\xd8\xff\x00", None, b"\x80abc"]
    frame = cudf.DataFrame({"k": cp.arange(3, dtype=cp.int64)})
    frame["image"] = gpu.series(pa.array(raw, pa.binary()), "binary")
    writer = ParquetSink().shard_writer(gpu, str(tmp_path / "part-00000.parquet"), schema,
                                        WriteOptions("zstd", 1000, None), ShardTask(0, "", 0, 0, 0, "part-00000.parquet"))
    writer.write(frame)
    writer.close()
    table = pq.read_table(tmp_path / "part-00000.parquet")
    assert table.schema.remove_metadata() == arrow_schema(schema)
    assert table.column("image").to_pylist() == raw


def test_case_and_strip_are_the_cpus(gpu):
    values = ["İSTANBUL", "straße", "ﬁle", "ᾳ", "\U00010428x", "\u3000 x\x01", "\x1fy ", None, "plain"]
    for how in ("text_lower", "text_upper", "text_strip"):
        assert host(getattr(gpu, how)(gpu.series(values, "string"))) == \
               host(getattr(CPU, how)(CPU.series(values, "string"))), how


def test_row_hash_meets_zero_and_every_nan(gpu):
    import struct

    other_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0]
    values = pa.array([0.0, -0.0, float("nan"), other_nan, 1.5, None], pa.float64())
    h = host(gpu.row_hash([gpu.series(values, "float64")]))
    assert h[0] == h[1] and h[2] == h[3] and len(set(h)) == 4


def test_utc_timestamps_keep_their_values(gpu):
    values = [0, 1_700_000_000_123_456, None]
    s = gpu.series(pa.array(values, pa.timestamp("us", tz="UTC")), "timestamp")
    assert s.dtype == gpu.dtype("timestamp")
    assert host(s) == pa.array(values, pa.timestamp("us", tz="UTC")).to_pylist()
