from gpuetl.docs import STEPS_MD, steps_markdown
from gpuetl.steps import STEPS
from gpuetl.expr import FUNCTIONS


def test_steps_md_is_generated_from_the_registry():
    assert STEPS_MD.read_text() == steps_markdown(), "docs/steps.md is stale: run `python -m gpuetl.docs`"


def test_every_step_and_function_is_documented():
    text = steps_markdown()
    for name in STEPS:
        assert f"## {name}" in text
    for spec in FUNCTIONS.values():
        assert spec.signature in text
