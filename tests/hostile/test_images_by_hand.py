"""Images tried by hand as a data engineer would (issue 16): WebDataset tars cut short or joined,
repeated members, side files saved by a spreadsheet, fields named like the pixel columns. Each
record read is in the output or the quarantine with its reason; nothing outside the dataset
changes."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from gpuetl.cli import main
from gpuetl.errors import SpecError
from imagedata import balanced, jpeg_bytes, photo_folder, quarantine_of, rows_of, run_images, write


def _tar_bytes(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _four_jpegs() -> tuple[bytes, list[tarfile.TarInfo]]:
    data = _tar_bytes([(f"{i:04d}.jpg", jpeg_bytes(seed=i)) for i in range(4)])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return data, tar.getmembers()


def _run_tar(tmp_path, surroundings, data: bytes):
    write(tmp_path / "shards" / "s.tar", data)
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="shards/*.tar")
    assert balanced(result)
    return result, {r["key"] for r in rows_of(out)}, [r["_reason"] for r in quarantine_of(out)]


def test_tar_cut_inside_a_member_is_one_record_naming_the_member(tmp_path, surroundings):
    data, members = _four_jpegs()
    cut = members[2].offset_data + members[2].size // 2
    result, keys, reasons = _run_tar(tmp_path, surroundings, data[:cut])
    assert keys == {"0000", "0001"} and result.counts["quarantined"] == 1
    assert "'0002.jpg': the tar is cut short inside this member" in reasons[0], reasons
    assert "changed after planning" not in reasons[0]


@pytest.mark.parametrize("damage", ["in a header", "at a header", "bad checksum", "joined tars"])
def test_a_tar_that_does_not_end_cleanly_is_never_silent(tmp_path, surroundings, damage):
    """Python's tarfile ends its member list quietly at a cut or corrupt header: the members after
    it were lost without a word."""
    data, members = _four_jpegs()
    at = members[2].offset
    if damage == "in a header":
        data = data[: at + 100]
    elif damage == "at a header":
        data = data[:at]
    elif damage == "bad checksum":
        data = data[:at] + b"X" * 8 + data[at + 8:]
    else:
        data = data + _tar_bytes([("0009.jpg", jpeg_bytes(seed=9))])
    result, keys, reasons = _run_tar(tmp_path, surroundings, data)
    assert result.counts["quarantined"] == 1, reasons
    want = {"in a header": "damaged or cut-short member header at byte", "bad checksum": "damaged or cut-short",
            "at a header": "without its end-of-archive blocks", "joined tars": "after the tar's end-of-archive"}
    assert want[damage] in reasons[0]
    assert keys == ({"0000", "0001", "0002", "0003"} if damage == "joined tars" else {"0000", "0001"})


def test_a_clean_tar_padded_with_zeros_has_no_damage_record(tmp_path, surroundings):
    data, _ = _four_jpegs()
    result, keys, reasons = _run_tar(tmp_path, surroundings, data + b"\0" * 20480)
    assert keys == {"0000", "0001", "0002", "0003"} and reasons == []


def test_repeated_side_members_and_nameless_members_are_quarantined(tmp_path, surroundings):
    """Two `0001.cls` members: keeping either would lose the other's value silently."""
    data = _tar_bytes([("0001.jpg", jpeg_bytes(seed=1)), ("0001.cls", b"1"), ("0001.cls", b"2"),
                       ("0002.jpg", jpeg_bytes(seed=2)), ("0002.cls", b"7"),
                       (".hidden.jpg", jpeg_bytes(seed=3))])
    result, keys, reasons = _run_tar(tmp_path, surroundings, data)
    assert keys == {"0002"} and result.counts["quarantined"] == 2
    assert any("two members give the field 'cls'" in r for r in reasons), reasons
    assert any("'.hidden.jpg': a name starting with '.' has no key" in r for r in reasons), reasons


def test_side_file_saved_with_a_bom_and_labels_with_commas_and_unicode(tmp_path, surroundings):
    photo_folder(tmp_path / "photos", n=2, classes=("chats, été",))
    side = write(tmp_path / "labels.csv",
                 '\ufeffkey,label\n"chats, été/000.jpg","félin, petit"\n"chats, été/001.jpg",b\n'.encode())
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, source={"label": "file", "side_file": side.name})
    assert balanced(result) and result.counts["rows_out"] == 2
    assert {r["label"] for r in rows_of(out)} == {"félin, petit", "b"}


def test_side_file_record_with_more_fields_than_its_header_is_located(tmp_path):
    photo_folder(tmp_path / "photos", n=2)
    write(tmp_path / "labels.csv", b"key,label\ncat/000.jpg,a\ndog/001.jpg,one, two\n")
    with pytest.raises(SpecError, match=r"labels.csv, record 2: more fields than the header names") as err:
        run_images(tmp_path, source={"label": "file", "side_file": "labels.csv"})
    assert "quote a value holding a comma" in str(err.value)


@pytest.mark.parametrize("where", ["side file", "tar member"])
def test_a_field_named_like_a_pixel_column_is_a_located_error(tmp_path, surroundings, where):
    """decode writes width, height, channels and format: a side field `width` was overwritten
    by the decoded width without a word."""
    if where == "side file":
        photo_folder(tmp_path / "photos", n=2)
        write(tmp_path / "labels.csv", b"key,label,width\ncat/000.jpg,a,7\ndog/001.jpg,b,8\n")
        kw = {"source": {"label": "file", "side_file": "labels.csv"}}
    else:
        write(tmp_path / "shards" / "s.tar", _tar_bytes([("0001.jpg", jpeg_bytes()), ("0001.width", b"12")]))
        kw = {"path": "shards/*.tar"}
    with surroundings(tmp_path, dataset=tmp_path / "out"):
        with pytest.raises(SpecError, match=r"steps\[0\]\.decode: the column\(s\) 'width' exist already"):
            run_images(tmp_path, **kw)
    assert not (tmp_path / "out").exists()


def test_verify_and_inspect_on_an_images_dataset(tmp_path, capsys):
    photo_folder(tmp_path / "photos", n=3)
    result = run_images(tmp_path)
    assert balanced(result)
    assert main(["verify", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "out")]) == 0
    sample = [line for line in capsys.readouterr().out.splitlines() if line.startswith('  {"key"')]
    assert len(sample) == 3 and all('"image": "<' in line and '"width": 32' in line for line in sample)


@pytest.mark.parametrize("how", ["regex", "file"])
def test_an_empty_label_is_quarantined_not_a_class(tmp_path, surroundings, how):
    """`img__2.jpg` under `img_(?P<label>[^_]*)_`, or a side file's empty label: no class named ''."""
    for i, name in enumerate(["img_cat_1.jpg", "img__2.jpg"]):
        write(tmp_path / "photos" / name, jpeg_bytes(seed=i))
    write(tmp_path / "labels.csv", b"key,label\nimg_cat_1.jpg,cat\nimg__2.jpg,\n")
    source = ({"label": "regex", "label_regex": "img_(?P<label>[^_]*)_"} if how == "regex"
              else {"label": "file", "side_file": "labels.csv"})
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="photos/*.jpg", source=source)
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 1
    assert [r["label"] for r in rows_of(out)] == ["cat"]
    assert "img__2.jpg" in quarantine_of(out)[0]["_reason"]


def _jpeg_claiming(w: int, h: int) -> bytes:
    data = bytearray(jpeg_bytes(seed=4))
    sof = data.find(b"\xff\xc0")
    data[sof + 5: sof + 9] = w.to_bytes(2, "big") + h.to_bytes(2, "big")     # height, width as stored
    return bytes(data)


def test_a_jpeg_header_claiming_a_huge_size_names_the_pixels_it_claims(tmp_path, surroundings):
    """Pillow refuses past twice its own limit, before max_pixels is looked at: the reason said
    'exceeds limit of 178956970 pixels', a number the user never set."""
    write(tmp_path / "photos" / "x" / "big.jpg", _jpeg_claiming(60000, 60000))
    write(tmp_path / "photos" / "x" / "ok.jpg", jpeg_bytes())
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path)
    assert balanced(result) and result.counts["quarantined"] == 1
    reason = quarantine_of(out)[0]["_reason"]
    assert "over the pixel limit: the header gives 3,600,000,000 pixels" in reason and "178956970" not in reason


def test_max_pixels_past_what_pillow_opens_is_a_pipeline_error(tmp_path):
    photo_folder(tmp_path / "photos", n=1)
    with pytest.raises(SpecError, match=r"source.max_pixels.*178956970"):
        run_images(tmp_path, source={"max_pixels": 300_000_000})


@pytest.mark.parametrize("layout", ["tar shards", "flat folder"])
def test_one_label_for_every_image_from_parent_folders_is_noted(tmp_path, surroundings, layout):
    """WebDataset shards under the default `label: parent` all got their folder's name as the
    label ('shards'), as did a flat folder of images: one class, without a word."""
    if layout == "tar shards":
        write(tmp_path / "shards" / "s.tar", _tar_bytes([(f"{i:04d}.jpg", jpeg_bytes(seed=i)) for i in range(2)]))
        path = "shards/*.tar"
    else:
        for i in range(2):
            write(tmp_path / "shards" / f"{i}.jpg", jpeg_bytes(seed=i))
        path = "shards/*.jpg"
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path=path)
    assert balanced(result) and {r["label"] for r in rows_of(out)} == {"shards"}
    assert any("gives every image the one label 'shards'" in n for n in result.manifest["notes"])
    two = run_images(tmp_path, path="shards/*.tar" if layout == "tar shards" else "shards/*.jpg",
                     source={"label": "none"})
    assert not any("one label" in n for n in two.manifest["notes"])


def test_names_that_are_not_utf8_are_quarantined_not_an_internal_error(tmp_path, surroundings):
    """A file named with bytes that are not UTF-8 (and a tar member so named) stopped the run with
    an internal UnicodeEncodeError: a key and `_file` are text."""
    folder = tmp_path / "photos" / "cat"
    folder.mkdir(parents=True)
    with open(os.path.join(os.fsencode(folder), b"\xff\xfebad.jpg"), "wb") as fh:
        fh.write(jpeg_bytes(seed=1))
    write(folder / "ok.jpg", jpeg_bytes(seed=2))
    write(tmp_path / "photos" / "s.tar", _tar_bytes([("\udcff01.jpg", jpeg_bytes(seed=3)),
                                                      ("0002.jpg", jpeg_bytes(seed=4))]))
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="photos/**/*")
    assert balanced(result) and result.counts["rows_out"] == 2 and result.counts["quarantined"] == 2
    bad = {r["_raw"]: r["_reason"] for r in quarantine_of(out)}
    assert set(bad) == {b"cat/\xff\xfebad.jpg", b"\xff01"}                    # the exact bytes of the names
    assert all("is not UTF-8 text" in why for why in bad.values())
    assert {r["key"] for r in rows_of(out)} == {"cat/ok.jpg", "0002"}


def test_a_compressed_tar_named_tar_says_to_decompress_it(tmp_path, surroundings):
    import gzip

    write(tmp_path / "shards" / "s.tar", gzip.compress(_tar_bytes([("0001.jpg", jpeg_bytes())])))
    write(tmp_path / "shards" / "t.tar", _tar_bytes([("0002.jpg", jpeg_bytes(seed=2))]))
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, path="shards/*.tar")
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 1
    assert "s.tar: a gzip-compressed tar: images read plain .tar shards; decompress it first" in \
        quarantine_of(out)[0]["_reason"]


def test_side_file_keys_that_match_no_image_are_noted(tmp_path, surroundings):
    """A side file written with `./cat/000.jpg` keys labels nothing: every image was quarantined
    as missing from it, and nothing said the file's keys were the wrong form."""
    photo_folder(tmp_path / "photos", n=2)
    write(tmp_path / "labels.csv", b"key,label\n./cat/000.jpg,a\ndog/001.jpg,b\n")
    out = tmp_path / "out"
    with surroundings(tmp_path, dataset=out):
        result = run_images(tmp_path, source={"label": "file", "side_file": "labels.csv"})
    assert balanced(result) and result.counts["rows_out"] == 1 and result.counts["quarantined"] == 1
    (note,) = [n for n in result.manifest["notes"] if "side_file" in n]
    assert "1 of its 2 keys match no image (e.g. './cat/000.jpg')" in note and "such as 'cat/000.jpg'" in note
