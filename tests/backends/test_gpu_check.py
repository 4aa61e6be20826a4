"""benchmarks/gpu_check.py, the one call a lent GPU machine runs, exercised on the CPU backend at
a tiny size (--smoke): every section runs and writes its JSON, so the script cannot fail on first
contact with a GPU for a reason a CPU machine could have shown."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE_TESTS = "tests/backends/test_gpu_rules.py tests/backends/test_parity.py"   # gpu-marked tests among them
SECTIONS = ["00_machine", "01_tests", "02_inputs", "03_read", "04_gpu_100KB", "04_gpu_200KB", "04_gpu_shuffled_100KB", "05_cpu",
            "06_polars", "07_summary", "08_records", "09_images", "10_loader"]


@pytest.mark.slow
def test_gpu_check_smoke_writes_every_section(tmp_path):
    out = tmp_path / "out"
    # the set-up walk collects the two modules the smoke's test section runs: collecting every gpu
    # test is `make test`'s own collection and the rehearsal's (gpu/rehearse.py), a second pytest
    # process here would repeat it (~8 CPU-s)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--out", str(out),
                           "--data", str(tmp_path / "data"), "--tests", SMOKE_TESTS],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    written = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    for name in SECTIONS:
        assert name in written and "error" not in written[name], (name, written.get(name))
    assert written["01_tests"]["ok"] is True
    # each section's GPU set-up walked: those modules' gpu tests collected with no error (RAPIDS may be absent here)
    setup = written["00_setup"]
    assert setup["01_tests"]["returncode"] == 0 and not setup["01_tests"]["errors"], setup["01_tests"]
    assert "collected" in setup["01_tests"]["summary"] and set(setup) >= {"03_read", "04_gpu", "09_images", "10_loader"}
    assert written["04_gpu_200KB"]["counts"]["rows_in"] > 0
    assert written["04_gpu_200KB"]["counts"] == written["05_cpu"]["counts"]
    summary = written["07_summary"]
    assert summary["same_rows_as_cpu"] is True and summary["gpu_gbps"] > 0
    assert set(summary["worker_peak_rss_by_size"]) == {"100KB", "200KB"}
    shuffled = written["04_gpu_shuffled_100KB"]
    assert shuffled["counts"] == written["04_gpu_100KB"]["counts"] and len(shuffled["shards"]) == 8
    assert summary["shuffled_spill_host_bytes"] == 0
    estimated = written["00_machine"]["estimated_seconds"]
    assert set(estimated) >= {"01_tests", "04_gpu", "09_images"} and sum(estimated.values()) < 560
    records = written["08_records"]
    assert records["jsonl_cpu"]["counts"]["quarantined"] > 0 and records["csv_cpu"]["counts"]["rows_out"] > 0
    images = written["09_images"]
    assert images["images"] == 24 and images["images_per_s"] > 0 and images["counts"]["rows_out"] == 24
    loader = written["10_loader"]                 # the Loader's epochs over what 04 and 09 wrote
    for batch in (1024, 65_536):
        epoch = loader[f"tabular_batch_{batch}"]
        assert epoch["split_rows"] == written["04_gpu_100KB"]["counts"]["rows_out"] > 0
        assert epoch["rows"] == -(-epoch["split_rows"] // batch) * batch       # drop_last=False: padded
    assert loader["images"]["shape_chw"] == [3, 224, 224] and 0 < loader["images"]["images"] <= 24


def test_a_section_that_does_not_fit_the_budget_is_skipped_and_says_so(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    out = tmp_path / "out"
    assert check.main(["--smoke", "--tests", "", "--budget", "1", "--out", str(out), "--data", str(tmp_path)]) == 1
    written = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert set(written) == {"00_machine", "00_setup", "02_inputs"}
    assert written["02_inputs"]["skipped"].startswith("needs about")
    assert not (tmp_path / "out" / "04_gpu_100KB.json").exists()
