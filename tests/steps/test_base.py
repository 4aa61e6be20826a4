"""What every step shares: dask tokenizes steps by class and parameters, deterministically."""

import dask
import pytest
from dask.tokenize import tokenize

from gpuetl.steps.base import STEPS, step_class

EXAMPLES = {"cast": {"amount": "float64"}, "filter": "status < 400", "dedupe": {}, "rename": {"a": "b"}}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_step_tokenizes_by_its_parameters(name):
    make = step_class(name).from_raw
    with dask.config.set({"tokenize.ensure-deterministic": True}):
        assert tokenize(make(EXAMPLES[name])) == tokenize(make(EXAMPLES[name]))
    assert name in STEPS


def test_different_parameters_give_different_tokens():
    cast = step_class("cast").from_raw
    assert tokenize(cast({"amount": "float64"})) != tokenize(cast({"amount": "float32"}))
    assert tokenize(step_class("filter").from_raw("a < 1")) != tokenize(step_class("filter").from_raw("a < 2"))
