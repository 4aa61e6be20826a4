"""Hostile images: broken files, a decompression bomb, tars that point outside, links. Each is
quarantined with its reason and its exact bytes; the accounting holds; nothing outside the
dataset changes."""

from __future__ import annotations

import io
import os
import struct
import tarfile
import zlib

import pytest
from PIL import ImageFile

from gpuetl.errors import DataError
from imagedata import balanced, jpeg_bytes, quarantine_of, rows_of, run_images, write


def _bomb_png(side: int = 30000) -> bytes:
    """A real 30000×30000 1-bit PNG (900 M pixels) that is about 100 KB on disk: zero rows."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    comp = zlib.compressobj(1)
    row = b"\x00" * (1 + side // 8)
    block = row * 1000
    idat = b"".join(comp.compress(block) for _ in range(side // 1000)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_broken_files_are_quarantined_with_reasons_and_bytes(tmp_path, surroundings, monkeypatch):
    good = jpeg_bytes(seed=1)
    cases = {
        "empty.jpg": (b"", "empty file"),
        "truncated.jpg": (good[: len(good) // 2], "cannot decode the image"),
        "text.jpg": (b"this is not a picture\n", "not a JPEG, PNG or WebP"),
        "bomb.png": (_bomb_png(), "over the pixel limit"),
        "garbage.webp": (b"RIFF\x00\x00\x00\x00WEBPVP8 junk", "unreadable image header"),
    }
    for name, (data, _) in cases.items():
        write(tmp_path / "photos" / "x" / name, data)
    write(tmp_path / "photos" / "x" / "good.jpg", good)
    assert os.path.getsize(tmp_path / "photos" / "x" / "bomb.png") < 1_000_000
    loaded = []
    real_load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: loaded.append(self.size) or real_load(self))
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path)
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == len(cases)
    assert (30000, 30000) not in loaded                  # the bomb was refused from its header
    got = {os.path.basename(r["_file"]): r for r in quarantine_of(out)}
    for name, (data, reason) in cases.items():
        assert reason in got[name]["_reason"], (name, got[name]["_reason"])
        assert got[name]["_raw"] == data                   # the exact input bytes, as binary
    assert got["bomb.png"]["_stage"].startswith("0")
    assert rows_of(out)[0]["key"] == "x/good.jpg"


def test_pixel_limit_is_the_sources_option_not_a_global(tmp_path):
    from PIL import Image

    before = Image.MAX_IMAGE_PIXELS
    write(tmp_path / "photos" / "x" / "a.jpg", jpeg_bytes(64, 48))
    # the only image is over the limit, which is what is tested: the empty dataset is committed
    result = run_images(tmp_path, source={"max_pixels": 64 * 48 - 1}, allow_empty_output=True)
    assert balanced(result) and result.counts["quarantined"] == 1
    assert "max_pixels 3,071" in quarantine_of(tmp_path / "out")[0]["_reason"]
    assert Image.MAX_IMAGE_PIXELS == before


def _hostile_tar(path):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        def add(name, data=b"", **kw):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            for k, v in kw.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(data) if data else None)
        add("ok/0001.jpg", jpeg_bytes(seed=1))
        add("../escape/0002.jpg", jpeg_bytes(seed=2))
        add("/etc/0003.jpg", jpeg_bytes(seed=3))
        add("ok/0004.jpg", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        add("ok/0005.jpg", type=tarfile.LNKTYPE, linkname="ok/0001.jpg")
        add("ok/0006.jpg", type=tarfile.FIFOTYPE)


def test_tar_members_with_dotdot_absolute_paths_and_links(tmp_path, surroundings):
    _hostile_tar(write(tmp_path / "shards" / "s.tar", b"").parent / "s.tar")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="shards/*.tar")
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 5
    reasons = {r["_raw"].decode(): r["_reason"] for r in quarantine_of(out)}
    assert "'..'" in reasons["../escape/0002.jpg"] and "absolute path" in reasons["/etc/0003.jpg"]
    assert "a link" in reasons["ok/0004.jpg"] and "a link" in reasons["ok/0005.jpg"]
    assert "not a regular file" in reasons["ok/0006.jpg"]
    assert not (tmp_path / "escape").exists()


def test_truncated_tar_keeps_what_precedes_the_damage(tmp_path):
    path = tmp_path / "shards" / "s.tar"
    path.parent.mkdir()
    with tarfile.open(path, "w") as tar:
        for i in range(3):
            data = jpeg_bytes(seed=i)
            info = tarfile.TarInfo(f"{i:04d}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = run_images(tmp_path, path="shards/*.tar")
    assert balanced(result) and result.counts["rows_out"] >= 1 and result.counts["quarantined"] >= 1


def test_a_symlink_leading_outside_the_folder_is_not_read(tmp_path, surroundings):
    secret = write(tmp_path / "secret" / "key.jpg", b"PRIVATE KEY")
    write(tmp_path / "photos" / "x" / "a.jpg", jpeg_bytes())
    os.symlink(secret, tmp_path / "photos" / "x" / "link.jpg")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path)
    assert balanced(result) and result.counts["quarantined"] == 1
    (bad,) = quarantine_of(out)
    assert "outside" in bad["_reason"] and b"PRIVATE" not in bad["_raw"]


def test_a_folder_link_leading_outside_is_not_read(tmp_path, surroundings):
    """The planner resolves each folder once: a linked folder's images are outside all the same."""
    write(tmp_path / "secret" / "key.jpg", jpeg_bytes(seed=3))
    write(tmp_path / "photos" / "x" / "a.jpg", jpeg_bytes())
    os.symlink(tmp_path / "secret", tmp_path / "photos" / "y")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path)
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 1
    (bad,) = quarantine_of(out)
    assert "outside" in bad["_reason"] and bad["_raw"].endswith(b"photos/y/key.jpg")   # the name, not the bytes


def test_on_error_fail_names_the_file(tmp_path):
    write(tmp_path / "photos" / "x" / "a.jpg", b"nope")
    with pytest.raises(DataError, match="a.jpg"):
        run_images(tmp_path, on_error="fail")
