"""The host-transfer ledger sees every process and the spill pieces' file I/O (marker gpu_api:
`make gpu-api`). On a LocalCUDACluster the client reads spill pieces and encodes shards in its own
process, and libcudf writes and reads the pieces through KvikIO, whose POSIX path moves every byte
through host bounce buffers: `spill_host_bytes` counts them instead of being 0 by construction."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.gpu_api

try:                                        # RAPIDS installed: import it without touching CUDA
    os.environ.setdefault("RAPIDS_NO_INITIALIZE", "1")
    from gpuetl.backends import gpu, gpu_tallies
except Exception as err:                    # noqa: BLE001 (no RAPIDS, or a broken install)
    pytest.skip(f"RAPIDS does not import here ({type(err).__name__}: {err}); run `make gpu-api`",
                allow_module_level=True)


class Monitor:
    """kvikio.SummaryMonitor as the statistics would read after libcudf's POSIX-path I/O."""

    moved = {"POSIX": {"bytes_transferred": 4096}, "GDS": {"bytes_transferred": 0}}

    def get(self):
        return None

    def since(self, before):
        return SimpleNamespace(by_backend=self.moved)


@pytest.fixture
def ledger():
    gpu_tallies.reset_tallies()
    yield
    gpu_tallies.reset_tallies()


def test_spill_piece_io_is_counted_by_the_path_kvikio_took(monkeypatch, ledger):
    monkeypatch.setattr(gpu.kvikio, "SummaryMonitor", Monitor)
    backend = gpu.GpuBackend()
    assert backend.counted_file_io("spill pieces written", lambda: 1, lambda: "written") == "written"
    report = gpu_tallies.host_transfer_report(gpu_tallies.worker_tallies(), 10_000)
    assert report["reads"] == {"spill pieces written: kvikio posix": {"reads": 1, "bytes": 4096}}
    assert report["bounce_buffer_bytes"] == 4096            # through host memory, said so


def test_unattributed_io_counts_the_file_bytes(monkeypatch, ledger):
    monkeypatch.setattr(Monitor, "moved", {})
    monkeypatch.setattr(gpu.kvikio, "SummaryMonitor", Monitor)
    gpu.GpuBackend().counted_file_io("spill pieces read", lambda: 777, lambda: None)
    assert gpu_tallies.worker_tallies()["reads"] == {"spill pieces read: kvikio unattributed reads": 1,
                                                     "spill pieces read: kvikio unattributed bytes": 777}


class Client:
    """A dask client whose workers run `fn` in the processes `pids`."""

    def __init__(self, pids, tallies):
        self.pids, self.tallies = pids, tallies

    def run(self, fn):
        return {f"w{i}": (pid, self.tallies) for i, pid in enumerate(self.pids)}


def test_the_clients_own_copies_are_in_the_report(ledger):
    """The client's process (which reads spill pieces and encodes shards on a LocalCUDACluster)
    is counted with the workers, and a worker in the client's own process only once."""
    gpu_tallies.count_host_bytes("spill: run-store piece read through a host file", 100)
    worker = {"fallbacks": {}, "host_bytes": {"control: rows left": 1}, "reads": {}}
    backend = gpu.GpuBackend()
    other = backend._tallies(Client([os.getpid() + 1], worker))
    assert other["host_bytes"] == {"spill: run-store piece read through a host file": 100, "control: rows left": 1}
    threaded = backend._tallies(Client([os.getpid()], gpu_tallies.worker_tallies()))
    assert threaded["host_bytes"] == {"spill: run-store piece read through a host file": 100}
