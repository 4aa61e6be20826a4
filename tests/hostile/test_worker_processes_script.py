"""A caller's script with no `if __name__ == "__main__":` guard runs a pipeline on worker
processes (`scheduler="processes"`): the workers are gpuetl's own program, so the script runs
once (multiprocessing's spawn would import it again in every child, each starting a run of its
own); the dataset is whole, the accounting holds, and nothing outside the dataset changed."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, os, sys
    with open(sys.argv[2], "a") as f:                 # every time this file is executed
        f.write(f"{os.getpid()}\\n")
    import gpuetl
    spec = {"version": 1, "name": "unguarded", "source": {"type": "text", "path": "in/*.log", "blocksize": "8KiB"},
            "parse": {"preset": "apache_combined"}, "steps": [{"filter": "status < 400"}],
            "on_error": "quarantine", "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=sys.argv[1]).run(backend="cpu", scheduler="processes")
    print(json.dumps(result.counts))
""")


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once_on_worker_processes(tmp_path, surroundings):
    from gpuetl import samples

    work = tmp_path / "work"
    (work / "in").mkdir(parents=True)
    samples.write_access_logs(work / "in" / "a.log", lines=400, bad_every=40)
    (work / "script.py").write_text(SCRIPT)
    runs = tmp_path / "runs.txt"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with surroundings(work, dataset=work / "out"):
        out = subprocess.run([sys.executable, str(work / "script.py"), str(work), str(runs)], env=env,
                             capture_output=True, text=True, timeout=300, cwd=work)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(runs.read_text().split()) == 1          # the script ran once, in its own process
    c = json.loads(out.stdout.strip().splitlines()[-1])
    assert c["rows_in"] == 400 and c["quarantined"] == 10
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    assert (work / "out" / "_SUCCESS").exists()


@pytest.mark.slow
def test_a_run_that_fails_on_worker_processes_commits_nothing_and_leaves_no_worker(tmp_path, surroundings,
                                                                                  monkeypatch):
    """Every record bad: the workers' error reaches the caller as gpuetl's DataError, nothing is
    committed, the run's temporary files are gone but the failed run's report, no worker process
    is left and nothing outside the dataset folder changed."""
    import gpuetl
    from gpuetl.errors import DataError
    from gpuetl.runtime import executor

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.log").write_text("".join(f"not an access log line {i}\n" for i in range(3000)))
    spec = {"version": 1, "name": "all-bad", "source": {"type": "text", "path": "in/*.log", "blocksize": "16KiB"},
            "parse": {"preset": "apache_combined"}, "on_error": "quarantine", "sink": {"path": "out"}}
    monkeypatch.setattr(executor, "local_threads", lambda: 2)
    before = children()
    with surroundings(tmp_path, dataset=tmp_path / "out"), pytest.raises(DataError, match="no record was kept"):
        gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="processes")
    assert children() == before
    out = tmp_path / "out"
    assert not (out / "_SUCCESS").exists() and not (out / "_manifest.json").exists()
    left = [p.relative_to(out).parts for p in out.rglob("*") if p.is_file()]
    assert left and all(parts[0] == "_tmp" and parts[1].endswith("-report") for parts in left), left


def children() -> list[int]:
    pids = []
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except FileNotFoundError:         # a thread that ended since the listing started no child
            continue
    return sorted(pids)
