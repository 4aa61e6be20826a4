"""The `slow` marker's rule, kept by the suite itself (a pytest plugin, loaded by tests/conftest.py).

A test that takes over 2 s is marked `slow` (`make test-fast` leaves those out). A test's time
here is its call and the function-scoped fixtures it sets up: a fixture shared by a module or the
session is paid once, by whichever test comes first, and is not charged to it. At the end of a run
the unmarked tests over `slow_report_s` are listed; one over `slow_fail_s` fails the run.
"""

from __future__ import annotations

import time

import pytest

_OWN_SETUP = pytest.StashKey[float]()
# Not judged: the slow tests, and the tiers run on their own (`make gpu-api`, `make test-torch`,
# `pytest -m gpu` on a device), which `make test` and `make test-fast` skip.
TIERS = {"slow", "gpu", "gpu_api", "torch"}


def pytest_addoption(parser):
    parser.addini("slow_report_s", "list the tests not marked slow that took longer (seconds)", default="2")
    parser.addini("slow_fail_s", "fail the run if a test not marked slow took longer (seconds)", default="6")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):            # pytest-xdist's controller judges, its workers only run
        config.pluginmanager.register(SlowRule(config), "slow_rule_judge")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    start = time.perf_counter()
    yield
    if fixturedef.scope == "function":
        item = request.node
        item.stash[_OWN_SETUP] = item.stash.get(_OWN_SETUP, 0.0) + time.perf_counter() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if call.when == "call":
        report.own_seconds = call.duration + item.stash.get(_OWN_SETUP, 0.0)


class SlowRule:
    def __init__(self, config):
        self.report_s = float(config.getini("slow_report_s"))
        self.fail_s = float(config.getini("slow_fail_s"))
        self.over: list[tuple[float, str]] = []

    def pytest_runtest_logreport(self, report):
        seconds = getattr(report, "own_seconds", None)
        if seconds is not None and seconds > self.report_s and not TIERS.intersection(report.keywords):
            self.over.append((seconds, report.nodeid))

    def too_slow(self):
        return [(s, nodeid) for s, nodeid in self.over if s > self.fail_s]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.too_slow() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.over:
            return
        terminalreporter.section(f"not marked slow, over {self.report_s:g} s (call and own fixtures)")
        for seconds, nodeid in sorted(self.over, reverse=True):
            terminalreporter.write_line(f"{seconds:6.2f}s {nodeid}")
        too_slow = self.too_slow()
        if too_slow:
            terminalreporter.write_line(
                f"FAILED: {len(too_slow)} test(s) not marked slow took over {self.fail_s:g} s: "
                "mark them @pytest.mark.slow or make them faster", red=True, bold=True)
