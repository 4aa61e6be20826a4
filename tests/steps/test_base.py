"""What every step shares: one of two kinds (row-local or global), binding to the input schema
as a bound copy, the look-ahead hook, discovery by the registry, and tokens by class and
parameters."""

import pickle
import pkgutil

import dask
import pytest
from dask.tokenize import tokenize

import gpuetl.steps
from gpuetl.spec.yamlio import load_with_locations
from gpuetl.steps.base import (STEPS, Binding, GlobalStep, InOrderGlobalStep, RowStep, StepError, discover,
                               register, step_class)

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


# -- the two kinds of step, binding, look-ahead, discovery ------------------------------------

SCHEMA = {"ip": "string", "status": "int64", "message": "string", "size": "int64"}


def test_every_step_is_one_kind_or_the_other():
    discover()
    kinds = {name: (issubclass(cls, RowStep), issubclass(cls, GlobalStep)) for name, cls in STEPS.items()}
    assert all(row != glob for row, glob in kinds.values()), kinds
    assert {n for n, (_, glob) in kinds.items() if glob} == {"dedupe", "near_dedupe"}
    assert issubclass(STEPS["dedupe"], InOrderGlobalStep) and not issubclass(STEPS["near_dedupe"], InOrderGlobalStep)


def test_the_registry_finds_every_step_module_without_a_list():
    modules = {m.name for m in pkgutil.iter_modules(gpuetl.steps.__path__) if not m.name.startswith("_")}
    assert modules - {"base", "expr"} == {cls.__module__.rsplit(".", 1)[1] for cls in discover().values()}
    assert set(discover()) >= {"filter", "derive", "dedupe", "near_dedupe", "mask", "normalize_text", "cast", "fill",
                               "drop", "rename", "select", "decode", "resize", "center_crop", "convert", "encode",
                               "phash"}


def test_register_refuses_what_is_not_a_step():
    with pytest.raises(TypeError, match="not a RowStep or GlobalStep"):
        register(dict)


def test_a_global_step_without_its_protocol_cannot_be_made():
    class Half(GlobalStep):
        name = "half"

        def row_keys(self, df, backend):
            return None

    with pytest.raises(TypeError, match="abstract"):
        Half(None)


@pytest.mark.parametrize("name, raw, derived", [
    ("mask", {"kinds": ["email"]}, {"columns": ("ip", "message")}),
    ("fill", {"size": 0}, {"values": {"size": 0}, "types": {"size": "int64"}}),
    ("derive", {"big": "size * 2"}, {"types": {"big": "int64"}}),
    ("dedupe", {"on": ["ip"]}, {"keys": ("ip",)}),
])
def test_bind_returns_a_bound_copy_that_pickles_as_it_is(name, raw, derived):
    step = step_class(name).from_raw(raw)
    bound = step.bind(SCHEMA)
    assert step.binding is None and bound is not step and bound.params == step.params
    assert {k: getattr(bound.binding, k) for k in derived} == derived
    assert isinstance(bound.binding, Binding) and set(SCHEMA) <= set(bound.output_schema)
    again = pickle.loads(pickle.dumps(bound))
    assert again.binding == bound.binding and again.params == bound.params


def test_an_unbound_step_has_no_output_schema():
    with pytest.raises(RuntimeError, match="call bind"):
        step_class("select").from_raw(["ip"]).output_schema


def test_bind_refuses_parameters_that_do_not_fit_the_schema():
    with pytest.raises(StepError, match="no column 'nope'"):
        step_class("dedupe").from_raw({"on": ["nope"]}).bind(SCHEMA)


def test_look_ahead_is_a_no_op_by_default_and_decode_learns_a_later_resize():
    select = step_class("select").from_raw(["ip"])
    assert select.look_ahead([]) is select
    decode = step_class("decode").from_raw(None)
    resize = step_class("resize").from_raw({"size": [64, 32], "mode": "fill"})
    crop = step_class("center_crop").from_raw(32)
    ahead = decode.look_ahead([step_class("convert").from_raw("L"), resize])
    assert ahead.target == ("fill", 64, 32) and decode.target is None
    assert decode.look_ahead([crop, resize]) is decode                 # a crop needs the full size
    assert step_class("decode").from_raw({"draft": False}).look_ahead([resize]).target is None


@pytest.mark.parametrize("name", sorted(discover()))
def test_every_step_pickles_by_reference(name):
    """Plain pickle, not only cloudpickle: parameter models are named classes."""
    (item,), _ = load_with_locations(STEPS[name].example, "<example>")
    step = step_class(name).from_raw(item[name])
    assert pickle.loads(pickle.dumps(step)).params == step.params
