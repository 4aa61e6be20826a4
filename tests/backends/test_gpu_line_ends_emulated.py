"""backends/gpu.py's reading and line splitting run without a GPU (marker gpu_api: `make gpu-api`):
CuPy is numpy (a device array's `.set`/`.get` are copies), a cuDF strings Series built over
device bytes (gpu_device.strings_from_buffers, a pylibcudf STRING column: element i is
buf[bounds[i]:bounds[i+1]]) is a pandas Series over the same bytes, cuDF's Series and concat are
pandas', and KvikIO's read into device memory is a file read. With those stand-ins,
GpuBackend.read_block (its pieces and the newlines it adds after a file's last line) and
GpuBackend.split_lines (the record ends computed with the device's index arithmetic, the
records gathered from the column, invalid UTF-8 decoded on the host) must give the CPU
backend's records, byte for byte, and the line-ending rule's (sources/line_ends.py): a record
ends at '\\n' and one '\\r' before it; any other '\\r' is the record's."""

from __future__ import annotations

import gzip
import os
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends import gpu, gpu_device
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)

from gpuetl.backends.cpu import CpuBackend  # noqa: E402
from gpuetl.sources.files import resolve_inputs  # noqa: E402
from gpuetl.sources.ranges import plan_partitions, read_block  # noqa: E402
from gpuetl.sources.records import split_batch  # noqa: E402

CPU = CpuBackend()


class _DeviceArray(np.ndarray):
    """A numpy array with CuPy's host copies: `.set(host)` in, `.get()` out."""

    def set(self, host):
        self[...] = host

    def get(self):
        return np.asarray(self)


def _strings_from_buffers(buf, bounds, n):
    """gpu_device.strings_from_buffers on the host, with the column's contract checked: n + 1
    ascending offsets from 0 that end at the buffer's end. A piece that is not UTF-8 keeps its
    bytes as surrogates, so a record the backend failed to decode on the host cannot pass for
    one it did (that would hold U+FFFD)."""
    bounds = np.asarray(bounds)
    assert len(bounds) == n + 1 and bounds[0] == 0 and bounds[-1] == len(buf)
    assert (np.diff(bounds) >= 0).all()
    data = np.asarray(buf).tobytes()
    return pd.Series([data[a:b].decode("utf-8", "surrogateescape") for a, b in zip(bounds[:-1], bounds[1:])],
                     dtype=object)


class EmulatedGpu(gpu.GpuBackend):
    """GpuBackend's own read_block and split_lines; a Series from host values is the CPU's (the
    device's would allocate), KvikIO's pread a file read into the stand-in device array."""

    def series(self, values, type_name, index=None):
        return CPU.series(values, type_name, index=index)

    def _pread(self, path, dest, file_offset):
        with open(path, "rb") as fh:
            fh.seek(file_offset)
            dest.set(np.frombuffer(fh.read(len(dest)), dtype=np.uint8))


@pytest.fixture
def device(monkeypatch):
    cupy = SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("_")})
    cupy.empty = lambda shape, dtype=float: np.empty(shape, dtype=dtype).view(_DeviceArray)
    cupy.asnumpy = np.asarray
    cudf = SimpleNamespace(Series=pd.Series, DataFrame=pd.DataFrame, concat=pd.concat)
    for module in (gpu, gpu_device):            # gpu_device: the helpers gpu.py shares with its facets
        monkeypatch.setattr(module, "cp", cupy)
        monkeypatch.setattr(module, "cudf", cudf)
    monkeypatch.setattr(gpu, "strings_from_buffers", _strings_from_buffers)
    backend = EmulatedGpu()
    backend.xp = cupy
    return backend


def by_the_rule(data: bytes, added=()) -> list[tuple[int, bytes]]:
    """(offset, bytes) of the records of a buffer, by the rule alone ('\\n' at `added` is not
    the input's, so the '\\r' before it stays)."""
    out, pos = [], 0
    parts = data.split(b"\n")
    for k, part in enumerate(parts):
        ended = k < len(parts) - 1
        record = part[:-1] if ended and part.endswith(b"\r") and pos + len(part) not in added else part
        if record:
            out.append((pos, record))
        pos += len(part) + 1
    return out


def _host(lines) -> list:
    raw = None if lines.raw is None else [None if v is None or v is pd.NA else bytes(v) for v in lines.raw.tolist()]
    return [list(lines.text.tolist()), [int(v) for v in np.asarray(lines.offsets)],
            [bool(v) for v in np.asarray(lines.bad_utf8)], raw]


BUFFERS = [
    # a second \r, invalid UTF-8 with one, a lone \r, a blank line, \r alone, no final \n
    b"a\r\r\n\xff\r\r\nx\ry\r\n\r\n\r\r\nend\r",
    b"GET /\xc3\xa9 200\r\nPOST /\xc3\xbc 404\r\n\r\n\xe6\x97\xa5 ok\r\nlast\r",
    b"\xc3\r\nok\n\xe2\x82\r\r\n\r",                    # sequences cut by the line ending
    b"\r", b"\r\n", b"\n\n", b"", b"plain\nascii\n\n",
]


@pytest.mark.parametrize("data", BUFFERS, ids=range(len(BUFFERS)))
def test_split_lines_on_the_device_keeps_every_carriage_return_but_the_line_endings(device, data):
    g, c = device.split_lines(data, 7), CPU.split_lines(data, 7)
    assert _host(g) == _host(c)
    text, offsets, bad, raw = _host(g)
    records = [r if b else t.encode() for t, b, r in zip(text, bad, raw or [None] * len(text))]
    assert list(zip(offsets, records)) == [(at + 7, record) for at, record in by_the_rule(data)]


def test_a_newline_the_reader_added_leaves_the_carriage_return_to_the_record(device):
    data = b"a\r\ntail\r\nb\r\n"                      # the '\n' at 8 was added after a file's last line
    g, c = device.split_lines(data, 0, [8]), CPU.split_lines(data, 0, [8])
    assert _host(g) == _host(c)
    assert _host(g)[0] == ["a", "tail\r", "b"]


@pytest.mark.parametrize("blocksize", [3, 7, 1 << 20])
def test_read_block_and_split_lines_on_the_device_equal_the_cpus(device, tmp_path, blocksize):
    files = {"a.log": b"a\r\r\n\xff\r\r\nx\ry\r\ntail\r",            # no final '\n': one is added
             "b.log": b"\r\r\nb\r\n",
             "c.log.gz": gzip.compress(b"gz\r\r\ngz tail\r"),
             "d.log": b"last\r\r"}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    inputs = resolve_inputs(["*"], tmp_path, "infer")
    got = []
    for part in plan_partitions(inputs, blocksize):
        g, c = device.read_block(inputs, part.ranges), read_block(inputs, part.ranges)
        assert np.asarray(g.data).tobytes() == bytes(c.data)
        assert (g.seg_pos, g.seg_start, g.seg_file, g.added) == (c.seg_pos, c.seg_start, c.seg_file, c.added)
        on_device = split_batch(g, 0, g.data, device)
        on_host = split_batch(c, 0, c.data, CPU)
        assert on_device[0].tolist() == on_host[0].tolist()
        assert [np.asarray(x).tolist() for x in on_device[1:4]] == [np.asarray(x).tolist() for x in on_host[1:4]]
        raw = [None if v is None or v is pd.NA else bytes(v) for v in on_device[4].tolist()] \
            if on_device[4] is not None else [None] * len(on_device[0])
        for text, file_index, offset, r in zip(on_device[0].tolist(), np.asarray(on_device[1]).tolist(),
                                                np.asarray(on_device[2]).tolist(), raw):
            got.append((inputs[file_index].display, offset, r if r is not None else text.encode()))
    want = [(f.display, at, record) for f in inputs
            for at, record in by_the_rule(gzip.decompress(files[f.display]) if f.display.endswith(".gz")
                                          else files[f.display])]
    assert got == want
    assert ("a.log", 13, b"tail\r") in got and ("d.log", 0, b"last\r\r") in got


def test_invalid_lines_cross_to_the_host_in_two_copies_whatever_their_number(device, monkeypatch):
    """A Latin-1 log is invalid UTF-8 on most lines: their bytes come to the host in one gather
    (and their spans in one copy before it), not a copy and a sync per line; the records are the
    CPU kernel's, U+FFFD and exact raw bytes included."""
    copies = []
    real = gpu.to_host_copy
    monkeypatch.setattr(gpu, "to_host_copy", lambda values, reason: copies.append(reason) or real(values, reason))
    lines = [f"caf\xe9 {i} na\xefve".encode("latin-1") if i % 3 else f"ok {i}".encode() for i in range(600)]
    data = b"\r\n".join(lines) + b"\n\xff\n\n\xc3\n"
    g, c = device.split_lines(data, 11), CPU.split_lines(data, 11)
    assert _host(g) == _host(c)
    assert sum(_host(g)[2]) == 400 + 2
    assert copies.count("invalid UTF-8 lines") == 2
