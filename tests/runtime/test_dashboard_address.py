"""Where `gpuetl run` serves the local cluster's dashboard: on loopback unless told otherwise
(its gpuetl page shows quarantine reasons, which quote record values); `--dashboard-address
HOST:PORT` serves it where asked, with a warning when other machines can reach it."""

from __future__ import annotations

import io
import re
import sys

import pytest
import yaml

from gpuetl import samples
from gpuetl.backends.cpu import CpuBackend
from gpuetl.cli import main
from gpuetl.runtime import executor


def any_port(address: str) -> str:
    """The same host, on a free port (tests must not need 8787)."""
    return address.rpartition(":")[0] + ":0"


@pytest.fixture
def pipe(tmp_path):
    samples.write_access_logs(tmp_path / "a.log", lines=40, bad_every=10)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "name": "dash", "source": {"type": "text", "path": "a.log"},
                                    "parse": {"preset": "apache_combined"}, "sink": {"path": "out"}}))
    return path


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.slow
def test_the_default_dashboard_listens_on_loopback_only():
    with executor.backend_cluster(CpuBackend(), True, any_port(executor.DASHBOARD_ADDRESS)) as cluster:
        bound = [s.getsockname()[0] for s in cluster.scheduler.http_server._sockets.values()]
    assert bound and set(bound) <= {"127.0.0.1", "::1"}, bound


@pytest.mark.slow
def test_a_run_at_a_terminal_serves_the_dashboard_on_loopback(pipe, tmp_path, monkeypatch):
    monkeypatch.setattr(executor, "DASHBOARD_ADDRESS", any_port(executor.DASHBOARD_ADDRESS))
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["run", str(pipe), "--backend", "cpu", "--no-progress", "--scheduler", "local"]) == 0
    err = sys.stderr.getvalue()
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/status$", err, re.M), err
    assert "reachable from other machines" not in err and (tmp_path / "out" / "_SUCCESS").exists()


@pytest.mark.slow
def test_dashboard_address_serves_where_asked_and_warns_when_it_is_open(pipe, tmp_path, capsys):
    """Asked for, the dashboard is served without a terminal too; a host other than loopback
    gets a warning that says what its pages show."""
    assert main(["run", str(pipe), "--backend", "cpu", "--no-progress", "--dashboard-address", "127.0.0.1:0"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^dashboard: http://127\.0\.0\.1:\d+/status$", err, re.M) and "reachable" not in err, err
    assert main(["run", str(pipe), "--backend", "cpu", "--no-progress", "--dashboard-address", "0.0.0.0:0",
                 "--set", "sink.mode=overwrite"]) == 0
    err = capsys.readouterr().err
    assert "dashboard: http://" in err
    assert "warning: the dashboard listens on 0.0.0.0:0, reachable from other machines; its pages show " \
           "quarantine reasons, which quote record values" in err


@pytest.mark.parametrize("address", ["8787", "host:port", "127.0.0.1:99999", "127.0.0.1: 80", ""])
def test_a_dashboard_address_that_is_not_host_and_port_is_a_usage_error(pipe, capsys, address):
    with pytest.raises(SystemExit) as stop:
        main(["run", str(pipe), "--dashboard-address", address])
    assert stop.value.code == 2 and "expected HOST:PORT" in capsys.readouterr().err
    assert not (pipe.parent / "out").exists()


@pytest.mark.parametrize("address, local", [
    ("127.0.0.1:8787", True), ("127.0.0.2:0", True), ("[::1]:8787", True), ("localhost:8787", True),
    ("0.0.0.0:8787", False), (":8787", False), ("[::]:8787", False), ("10.0.0.5:8787", False), ("gpu-box:8787", False),
])
def test_which_addresses_other_machines_can_reach(address, local):
    assert executor.dashboard_is_local(address) is local
