"""sources/pins.py: the API that says whether bytes read earlier are still in a file."""

import gzip
import os

from gpuetl.sources.pins import HASH, FilePin, Identity, RangePin, digest, pin_bytes


def pinned(path, ranges, compression=None, data=None):
    data = data if data is not None else path.read_bytes()
    pins = [pin_bytes(0, a, data[a:b]) for a, b in ranges]
    return FilePin.of_reads(Identity.at(str(path)), pins, compression)


def test_an_unchanged_identity_is_trusted_and_a_changed_one_rehashes_only_the_ranges_asked_for(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    pin = pinned(path, [(0, 3000), (3000, 5000), (5000, path.stat().st_size)])
    check = pin.check(str(path))
    assert check.same and check.rehashed == 0 and check.compared().startswith("identity (device, inode, size, mtime")
    os.utime(path)                                      # touched: the same bytes, re-hashed
    check = pin.check(str(path), only={(3000, 5000)})
    assert check.same and check.identity_changes == ["mtime", "ctime"] and (check.rehashed, check.rehashed_bytes) == (1, 2000)
    data = bytearray(path.read_bytes())
    data[4000] ^= 1
    path.write_bytes(data)
    os.utime(path, ns=(pin.identity.mtime_ns, pin.identity.mtime_ns))      # mtime set back as pinned
    check = pin.check(str(path))
    assert not check.same and check.identity_changes == ["ctime"]
    [bad] = check.mismatches
    assert (bad.start, bad.end, bad.found) == (3000, 5000, digest(bytes(data[3000:5000])))
    assert f"bytes 3000-5000: {HASH} {bad.expected} when read, {bad.found} now" == str(bad)
    assert pin.check(str(path), only={(0, 3000)}).same   # the skipped range holds what was read


def test_a_shorter_or_missing_file_is_a_mismatch_not_an_error(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"x\n" * 100)
    pin = pinned(path, [(0, 100), (100, 200)])
    path.write_bytes(b"x\n" * 60)
    check = pin.check(str(path))
    assert [str(m) for m in check.mismatches] == ["bytes 100-200: the file ends at byte 120 now"]
    path.write_bytes(b"x\n" * 30)                   # ends before the second range starts
    assert [str(m) for m in pin.check(str(path)).mismatches] == [
        "bytes 0-100: the file ends at byte 60 now", "bytes 100-200: the file ends at byte 60 now"]
    path.unlink()
    assert pin.check(str(path)).gone and pin.check(str(path)).compared() == "the file is gone"


def test_compressed_ranges_lie_in_the_decompressed_stream_and_may_overlap(tmp_path):
    text = b"".join(b"record %d\n" % i for i in range(5000))
    path = tmp_path / "a.log.gz"
    path.write_bytes(gzip.compress(text))
    pin = pinned(path, [(0, 20_000), (10_000, 30_000), (30_000, len(text))], "gzip", data=text)
    assert pin.stream == "decompressed"
    assert pin.check(str(path), always=True).same
    path.write_bytes(gzip.compress(text.replace(b"record 2000\n", b"record 2001\n")))
    assert [(m.start, m.end) for m in pin.check(str(path)).mismatches] == [(10_000, 30_000)]


def test_ranges_read_without_a_hash_are_vouched_for_by_the_identity_alone(tmp_path):
    path = tmp_path / "a.parquet"
    path.write_bytes(b"PAR1" * 10)
    pin = FilePin.of_reads(Identity.at(str(path)), [RangePin(0, 0, 40, None)], None)
    check = pin.check(str(path), always=True)
    assert check.same and "1 range not hashed when read" in check.compared()
    os.utime(path)
    [bad] = pin.check(str(path)).mismatches
    assert "not hashed when read" in str(bad) and "it changed" in str(bad)


def test_the_manifest_form_round_trips_and_a_forged_one_is_not_taken(tmp_path):
    path = tmp_path / "a.log"
    path.write_bytes(b"a\nb\n")
    pin = pinned(path, [(0, 2), (2, 4)])
    entry = {"path": "a.log", **pin.to_json()}
    assert FilePin.from_json(entry) == pin
    assert entry["content"]["hash"] == "xxh3_128" and entry["content"]["ranges"][0][:2] == [0, 2]
    for bad in ({"hash": "md5", "ranges": []}, {"hash": HASH, "ranges": [[4, 2, "x"]]},
                {"hash": HASH, "ranges": [["0", 2, "x"]]}, {"hash": HASH, "ranges": [], "compression": "xz"}):
        assert FilePin.from_json({**entry, "content": bad}) is None
    assert FilePin.from_json({"path": "a.log"}) is None
