import random

import numpy as np
import pyarrow as pa
import pydantic
import pytest

from gpuetl.backends.cpu_text import minhash as cpu_minhash, murmur3_32
from gpuetl.steps.base import StepError
from gpuetl.steps.near_dedupe import match_probability, permutations
from textdata import CPU, make_step, run_jsonl, write_jsonl

VOCAB = [f"w{i:04d}" for i in range(5000)]


# -- the hashing scheme is libcudf's ------------------------------------------------------------

def test_murmur3_x86_32_reference_values():
    def h(data: bytes, seed: int) -> int:
        buf = np.frombuffer(data, dtype=np.uint8)
        return int(murmur3_32(buf, np.array([0]), np.array([len(buf)]), seed)[0])
    assert h(b"", 0) == 0
    assert h(b"hello", 0) == 0x248BFA47
    assert h(b"The quick brown fox jumps over the lazy dog", 0x9747B28C) == 0x2FA826CD
    assert h(b"abc", 1) == h(b"abc", 1) != h(b"abc", 2)


def test_signatures_equal_cudfs_documented_example():
    """cudf.Series.str.minhash docstring: seed 0, a=[1,2,3], b=[4,5,6], width 5."""
    sig, valid = cpu_minhash(pa.array(["this is my", "favorite book", None, ""]), seed=0,
                             a=np.array([1, 2, 3], np.uint32), b=np.array([4, 5, 6], np.uint32), width=5)
    assert sig[:2].tolist() == [[1305480171, 462824409, 74608232], [32665388, 65330773, 97996158]]
    assert valid.tolist() == [True, True, False, True]
    assert sig[3].tolist() == [0, 0, 0]          # an empty string: libcudf's 0


def test_short_and_multibyte_strings_are_one_shingle():
    a, b = permutations(0, 8)
    whole, _ = cpu_minhash(pa.array(["héé", "abc"]), seed=3, a=a, b=b, width=5)
    again, _ = cpu_minhash(pa.array(["héé", "abc"]), seed=3, a=a, b=b, width=4)
    assert (whole == again).all()                # fewer characters than either width: the whole string


def test_permutations_are_odd_and_reproducible():
    a, b = permutations(7, 64)
    assert (a % 2 == 1).all() and (a == permutations(7, 64)[0]).all() and (b != permutations(8, 64)[1]).any()


# -- the decision -----------------------------------------------------------------------------

SCHEMA = {"m": "string"}


def test_verification_marks_exactly_at_the_threshold():
    step = make_step("near_dedupe", {"column": "m", "threshold": 0.75, "bands": 2, "rows": 4}, SCHEMA)
    base = np.arange(8, dtype=np.uint32)
    at = base.copy(); at[:2] += 100          # 6 of 8 equal: 0.75
    below = base.copy(); below[:3] += 100    # 5 of 8 equal: 0.625
    sig = np.stack([base, at, below])
    buckets = np.zeros(3, dtype=np.uint64)
    assert step._greedy(buckets, sig).tolist() == [False, True, False]


def near_copy(words, k, rnd):
    """A copy of a list of distinct words with k replaced by new words: Jaccard (n-k)/(n+k)."""
    out = list(words)
    for i in rnd.sample(range(len(words)), k):
        out[i] = rnd.choice(VOCAB[2500:]) + f"x{rnd.randrange(10**9)}"
    return out


def docs_with_planted_copies(count=30, n=40, seed=0):
    rnd = random.Random(seed)
    rows, expect_kept = [], []
    for d in range(count):
        words = rnd.sample(VOCAB[:2500], n)
        close = near_copy(words, 2, rnd)     # Jaccard 38/42 = 0.905
        far = near_copy(words, 12, rnd)      # Jaccard 28/52 = 0.538
        rows += [" ".join(words), " ".join(close), " ".join(far)]
        expect_kept += [True, False, True]
    return rows, expect_kept


def run_step(texts, **params):
    from gpuetl.backends.base import FILE_INDEX, OFFSET, STATUS

    step = make_step("near_dedupe", {"column": "m", **params}, SCHEMA)
    n = len(texts)
    df = CPU.xd.DataFrame({"m": CPU.series(texts, "string"), FILE_INDEX: CPU.series([0] * n, "int32"),
                           OFFSET: CPU.series(list(range(n)), "int64"), STATUS: CPU.series([0] * n, "int8")})
    df = step.prepare(df, CPU)
    keys = step.row_keys(df, CPU)
    candidates = step.candidates(df, keys, step.repeated_keys([keys], CPU), 0, CPU)
    df = step.mark(df, 0, step.decide([candidates], CPU), CPU)
    keep = step.keep(step.transform(df, CPU), CPU)
    return [True] * n if keep is None else keep.tolist()


def test_planted_near_copies_found_at_the_threshold_not_below():
    texts, expect = docs_with_planted_copies()
    assert run_step(texts, shingle="word", width=1, threshold=0.8) == expect
    # threshold just under the close copies' similarity still finds them; far ones never
    assert run_step(texts, shingle="word", width=1, threshold=0.85, bands=32, rows=8) == expect
    # a threshold below the far copies' similarity finds those too (given enough bands to meet)
    assert run_step(texts, shingle="word", width=1, threshold=0.4, bands=64, rows=2) == [True, False, False] * 30


def test_char_shingles_and_exact_copies():
    texts = ["the quick brown fox jumps over the lazy dog", "the quick brown fox jumps over the lazy dog!",
             "completely different text about logs", "the quick brown fox jumps over the lazy dog", "", "", None, None]
    # the '!' adds one 5-character shingle to 39: J = 39/40; empty texts are copies, nulls never
    assert run_step(texts, threshold=0.8) == [True, False, True, False, True, False, True, True]
    assert run_step(texts, threshold=1.0) == [True, True, True, False, True, False, True, True]


def test_match_probability():
    assert match_probability(0.8, 16, 8) == pytest.approx(0.948, abs=1e-3)
    assert match_probability(0.3, 16, 8) < 0.002


@pytest.mark.parametrize("raw, exc, message", [
    ({"column": "m", "threshold": 0}, pydantic.ValidationError, "greater than 0"),
    ({"column": "m", "shingle": "char", "width": 1}, pydantic.ValidationError, "width of 2"),
    ({"column": "m", "bands": 64, "rows": 64}, pydantic.ValidationError, "1024"),
    ({"column": "m", "shingles": "word"}, pydantic.ValidationError, "Extra inputs"),
])
def test_params_are_checked(raw, exc, message):
    with pytest.raises(exc, match=message):
        make_step("near_dedupe", raw, SCHEMA)


def test_column_must_be_text():
    with pytest.raises(StepError, match="int64, not string"):
        make_step("near_dedupe", {"column": "n"}, {"n": "int64"})


# -- whole runs ---------------------------------------------------------------------------------

def test_near_dedupe_in_a_pipeline_is_global_and_deterministic(tmp_path):
    texts, expect = docs_with_planted_copies(count=24, seed=1)
    records = [{"m": t, "i": i} for i, t in enumerate(texts)]
    # near-copies land in other files and partitions than their originals
    write_jsonl(tmp_path / "in" / "a.jsonl", records[0::3])
    write_jsonl(tmp_path / "in" / "b.jsonl", records[1::3] + [{"m": None, "i": -1}])
    write_jsonl(tmp_path / "in" / "c.jsonl", records[2::3])
    steps = [{"filter": "i != 5"}, {"near_dedupe": {"column": "m", "shingle": "word", "width": 1, "threshold": 0.8,
                                                    "bands": 8, "rows": 8}}]
    result, rows = run_jsonl(tmp_path, steps, {"m": "string", "i": "int64"}, blocksize="2KiB")
    want = sorted([i for i, k in enumerate(expect) if k and i != 5] + [-1])
    assert sorted(r["i"] for r in rows) == want
    stage = {s["name"]: s for s in result.stages}["near_dedupe"]
    assert stage["deduplicated"] == 24 - (1 if not expect[5] else 0) and result.counts["filtered"] == 1
    again, _ = run_jsonl(tmp_path, steps, {"m": "string", "i": "int64"}, blocksize="64KiB")
    assert again.shards == result.shards


def test_near_dedupe_keeps_the_first_by_file_and_offset(tmp_path):
    write_jsonl(tmp_path / "in" / "b.jsonl", [{"m": "error: disk full on /dev/sda1 at block 7"}])
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"m": "hello"}, {"m": "error: disk full on /dev/sda1 at block 8"}])
    _, rows = run_jsonl(tmp_path, [{"near_dedupe": {"column": "m", "threshold": 0.7, "bands": 4, "rows": 8}}],
                        {"m": "string"})
    assert [r["m"] for r in rows] == ["hello", "error: disk full on /dev/sda1 at block 8"]


# -- GPU parity ----------------------------------------------------------------------------------

def random_texts(n=300, seed=0):
    rnd = random.Random(seed)
    alphabet = "abcdef ghij  klmn\t\nopé€ü😀漢字"
    out = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 80))) for _ in range(n)]
    return out + [None, "", "a", "ab", "abcd", "abcde", " leading and  trailing "]


@pytest.mark.gpu
@pytest.mark.parametrize("shingle, width", [("char", 2), ("char", 5), ("word", 1), ("word", 3)])
def test_gpu_signatures_equal_cpu(shingle, width):
    pytest.importorskip("cudf")
    from gpuetl.backends import get_backend

    gpu = get_backend("gpu")
    texts = random_texts()
    a, b = permutations(11, 64)
    want, want_ok = CPU.minhash(CPU.series(texts, "string"), seed=11, a=a, b=b, width=width, shingle=shingle)
    got, got_ok = gpu.minhash(gpu.series(texts, "string"), seed=11, a=a, b=b, width=width, shingle=shingle)
    got, got_ok = gpu.to_host(got), gpu.to_host(got_ok)
    assert (got_ok == want_ok).all()
    assert (got[want_ok] == want[want_ok]).all()
