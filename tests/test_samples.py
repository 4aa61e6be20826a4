"""Tests for gpuetl.samples: determinism, shape of the lines, planted bad lines, CLI."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpuetl import samples

ROOT = Path(__file__).resolve().parents[1]

# A reasonable Apache combined regex (independent of the package's own preset).
COMBINED = re.compile(
    r"^(?P<ip>[0-9a-fA-F.:]+) (?P<ident>\S+) (?P<user>\S+) "
    r"\[(?P<time>\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "
    r'"(?P<request>(?P<method>GET|POST|PUT|DELETE|HEAD) (?P<path>/[^ "]*) (?P<protocol>HTTP/\d\.\d))" '
    r"(?P<status>[1-5]\d\d) (?P<size>\d+|-) "
    r'"(?P<referer>(?:[^"\\]|\\.)*)" "(?P<user_agent>(?:[^"\\]|\\.)*)"$'
)
SYSLOG = re.compile(
    r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \S+ [\w/.-]+(?:\[\d+\])?: .+$"
)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _lines(p: Path) -> list[str]:
    text = p.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return text[:-1].split("\n")


# --------------------------------------------------------------------------- access logs


def test_access_logs_deterministic(tmp_path):
    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    na = samples.write_access_logs(a, lines=5000, seed=7, bad_every=50)
    nb = samples.write_access_logs(b, lines=5000, seed=7, bad_every=50)
    samples.write_access_logs(c, lines=5000, seed=8, bad_every=50)
    assert na == nb == a.stat().st_size
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


PINNED_DIGEST = "7416ee1244b7bba0ef3c333795ffd5eabd9b9655a4fa3ed5f78ef047e4cad3d2"


def test_access_logs_known_digest_is_stable(tmp_path):
    """Same bytes on every machine: pin the digest of a small file.

    If this fails after an intentional change to the generator, update the digest.
    """
    p = tmp_path / "a.log"
    samples.write_access_logs(p, lines=2000, seed=0)
    lines = _lines(p)
    assert len(lines) == 2000
    assert _digest(p) == PINNED_DIGEST


def test_access_lines_match_combined_regex(tmp_path):
    p = tmp_path / "a.log"
    samples.write_access_logs(p, lines=20_000, seed=3)
    lines = _lines(p)
    assert len(lines) == 20_000
    bad = [ln for ln in lines if not COMBINED.match(ln)]
    assert bad == []
    m = [COMBINED.match(ln) for ln in lines]
    # realistic variety
    assert {x["method"] for x in m} == {"GET", "POST", "PUT", "DELETE", "HEAD"}
    statuses = {x["status"] for x in m}
    assert {"200", "301", "304", "404", "500"} <= statuses
    assert any(":" in x["ip"] for x in m), "some IPv6 clients"
    assert any(x["user"] != "-" for x in m) and any(x["user"] == "-" for x in m)
    assert len({x["time"][-5:] for x in m}) >= 4, "several time zones"
    assert all(x["size"] == "-" for x in m if x["status"] == "304")
    assert any(x["referer"] == "-" for x in m) and any(x["referer"].startswith("http") for x in m)
    assert any('\\"' in x["user_agent"] for x in m), "a user agent with an escaped quote"
    # ~1% verbatim repeats
    dups = sum(v - 1 for v in Counter(lines).values())
    assert 0.003 * len(lines) < dups < 0.03 * len(lines)


@pytest.mark.parametrize("bad_every", [1, 7, 500])
def test_bad_every_plants_exact_number(tmp_path, bad_every):
    n = 3001
    p = tmp_path / "a.log"
    samples.write_access_logs(p, lines=n, seed=1, bad_every=bad_every)
    lines = _lines(p)
    assert len(lines) == n
    bad_linenos = [i + 1 for i, ln in enumerate(lines) if not COMBINED.match(ln)]
    assert bad_linenos == list(range(bad_every, n + 1, bad_every))


def test_bad_every_spans_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(samples, "CHUNK_LINES", 1000)
    p = tmp_path / "a.log"
    samples.write_access_logs(p, lines=3500, seed=2, bad_every=333)
    lines = _lines(p)
    bad_linenos = [i + 1 for i, ln in enumerate(lines) if not COMBINED.match(ln)]
    assert bad_linenos == list(range(333, 3501, 333))


def test_target_bytes(tmp_path):
    p, q = tmp_path / "a.log", tmp_path / "b.log"
    n = samples.write_access_logs(p, target_bytes=1_000_000, seed=5)
    assert n == p.stat().st_size
    assert 1_000_000 <= n < 1_000_000 + 1000  # stops at the first line end past the target
    assert p.read_bytes().endswith(b"\n")
    samples.write_access_logs(q, target_bytes=300_000, seed=5)
    assert p.read_bytes().startswith(q.read_bytes())


def test_access_gzip(tmp_path):
    plain, gz, gz2 = tmp_path / "a.log", tmp_path / "a.log.gz", tmp_path / "b.log.gz"
    samples.write_access_logs(plain, lines=1000, seed=4)
    n = samples.write_access_logs(gz, lines=1000, seed=4, gzip=True)
    samples.write_access_logs(gz2, lines=1000, seed=4, gzip=True)
    assert gzip.decompress(gz.read_bytes()) == plain.read_bytes()
    assert n == plain.stat().st_size
    assert gz.read_bytes() == gz2.read_bytes()  # no mtime / name in the header


# --------------------------------------------------------------------------- events, syslog


def test_app_events(tmp_path):
    p, q = tmp_path / "e.jsonl", tmp_path / "f.jsonl"
    samples.write_app_events(p, lines=5000, seed=1, bad_every=100)
    samples.write_app_events(q, lines=5000, seed=1, bad_every=100)
    assert _digest(p) == _digest(q)
    lines = _lines(p)
    assert len(lines) == 5000
    good, bad = [], []
    for i, ln in enumerate(lines, 1):
        try:
            obj = json.loads(ln)
        except ValueError:
            obj = None
        (good if isinstance(obj, dict) else bad).append((i, obj))
    assert [i for i, _ in bad] == list(range(100, 5001, 100))
    objs = [o for _, o in good]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["ts"]) for o in objs)
    assert all(isinstance(o["event"], str) for o in objs)
    assert any(o.get("user_id") is None and "user_id" in o for o in objs), "some nulls"
    assert any("page" not in o for o in objs), "some missing keys"
    assert any(isinstance(o.get("duration_ms"), float) for o in objs)
    assert {type(o["ok"]) for o in objs if o.get("ok") is not None} == {bool}


def test_syslog(tmp_path):
    p = tmp_path / "s.log"
    samples.write_syslog(p, lines=3000, seed=1)
    lines = _lines(p)
    assert len(lines) == 3000
    assert [ln for ln in lines if not SYSLOG.match(ln)] == []
    assert any(re.match(r"^<\d+>", ln) for ln in lines)
    assert any(" kernel: " in ln for ln in lines)
    assert any(re.search(r" sshd\[\d+\]: Accepted publickey for ", ln) for ln in lines)
    assert any(re.match(r"^[A-Z][a-z]{2}  \d ", ln) for ln in lines), "space-padded day"


# --------------------------------------------------------------------------- CLI


@pytest.mark.slow
def test_cli_writes_sample_set(tmp_path):
    out = tmp_path / "data"
    assert samples.main([str(out)]) == 0          # idempotent: the command's run over it overwrites
    r = subprocess.run(
        [sys.executable, "-m", "gpuetl.samples", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [
        "access/access-000.log",
        "access/access-001.log",
        "access/access-002.log",
        "access/access-003.log.gz",
        "events/events-000.jsonl",
        "events/events-001.jsonl",
        "java/app-000.log",
        "syslog/syslog-000.log",
    ]
    assert "access-000.log" in r.stdout
    a1 = _lines(out / "access" / "access-001.log")
    assert sum(not COMBINED.match(ln) for ln in a1) == len(a1) // 500
    a0 = _lines(out / "access" / "access-000.log")
    assert all(COMBINED.match(ln) for ln in a0)
    assert len(_lines(out / "syslog" / "syslog-000.log")) == 10_000
