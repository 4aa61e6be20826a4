"""The suite keeps the `slow` marker's rule (tests/slow_rule.py): a run lists the unmarked tests
over the report limit and fails when one is over the fail limit. Checked on dummy tests with the
limits scaled down (2 s and 6 s in the suite: 0.2 s and 0.6 s here)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

LIMITS = "[pytest]\nmarkers =\n    slow: slow\n    gpu_api: a tier\nslow_report_s = 0.2\nslow_fail_s = 0.6\n"


def run(pytester, source: str):
    pytester.makeini(LIMITS)
    pytester.makepyfile(source)
    return pytester.runpytest_inprocess("-p", "slow_rule", "-p", "no:cacheprovider", "-p", "no:hypothesispytest")


def test_an_unmarked_test_over_the_report_limit_is_listed_and_the_run_passes(pytester):
    result = run(pytester, """
import time, pytest

def test_quick():
    pass

def test_lingers():
    time.sleep(0.3)

@pytest.mark.slow
def test_marked():
    time.sleep(0.7)

@pytest.mark.gpu_api
def test_of_a_tier_of_its_own():
    time.sleep(0.7)
""")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*not marked slow, over 0.2 s*", "*s test_an_unmarked*.py::test_lingers"])
    listed = result.stdout.str()
    assert "::test_lingers" in listed and "FAILED:" not in listed
    assert "::test_quick" not in listed and "::test_marked" not in listed and "::test_of_a_tier" not in listed


def test_an_unmarked_test_over_the_fail_limit_fails_the_run_though_every_test_passed(pytester):
    result = run(pytester, """
import time

def test_far_too_long():
    time.sleep(0.7)
""")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*s test_an_unmarked*.py::test_far_too_long",
                                 "FAILED: 1 test(s) not marked slow took over 0.6 s*"])


def test_a_tests_own_fixtures_count_and_a_shared_one_does_not(pytester):
    result = run(pytester, """
import time, pytest

@pytest.fixture(scope="session")
def shared():
    time.sleep(0.7)

@pytest.fixture
def own():
    time.sleep(0.3)

def test_with_shared(shared):
    pass

def test_with_own(own):
    pass
""")
    assert result.ret == pytest.ExitCode.OK
    listed = result.stdout.str()
    assert "::test_with_own" in listed and "::test_with_shared" not in listed
