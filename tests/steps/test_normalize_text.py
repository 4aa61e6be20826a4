import pydantic
import pytest

from gpuetl.steps.base import StepError
from textdata import CPU, frame, make_step, run_jsonl, values, write_jsonl

TEXTS = ["  Ｈｅｌｌｏ\u00a0\u00a0World \t", "ﬁle\n\x0bNAME ", None, "", "ÜNÏCODE   Is  fine"]


def test_all_operations_in_order():
    step = make_step("normalize_text", {"columns": ["m"], "lower": True}, {"m": "string"})
    out = values(step.transform(frame(m=("string", TEXTS)), CPU)["m"])
    assert out[:4] == ["hello world", "file name", None, ""]
    assert out[4] == "ünïcode is fine"


def test_defaults_keep_case():
    step = make_step("normalize_text", {"columns": ["m"]}, {"m": "string"})
    assert step.transform(frame(m=("string", TEXTS[:2])), CPU)["m"].tolist() == ["Hello World", "file NAME"]


def test_each_operation_alone():
    df = frame(m=("string", [" A\u00a0 B "]))
    def run(**ops):
        flags = {"nfkc": False, "lower": False, "collapse_whitespace": False, "strip": False, **ops}
        return make_step("normalize_text", {"columns": ["m"], **flags}, {"m": "string"}).transform(df, CPU)["m"][0]
    assert run(nfkc=True) == " A  B "
    assert run(lower=True) == " a\u00a0 b "
    assert run(strip=True) == "A\u00a0 B"
    assert run(collapse_whitespace=True) == " A\u00a0 B "


def test_params_are_checked():
    with pytest.raises(pydantic.ValidationError, match="at least one"):
        make_step("normalize_text", {"columns": ["m"], "nfkc": False, "collapse_whitespace": False, "strip": False},
                  {"m": "string"})
    with pytest.raises(pydantic.ValidationError):
        make_step("normalize_text", {"columns": ["m"], "lowercase": True}, {"m": "string"})
    with pytest.raises(StepError, match="int64, not string"):
        make_step("normalize_text", {"columns": ["n"]}, {"n": "int64"})


def test_normalize_in_a_pipeline(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"m": t} for t in TEXTS])
    _, rows = run_jsonl(tmp_path, [{"normalize_text": {"columns": ["m"], "lower": True}}], {"m": "string"})
    assert [r["m"] for r in rows][:4] == ["hello world", "file name", None, ""]


@pytest.mark.gpu
def test_gpu_matches_cpu():
    pytest.importorskip("cudf")
    from gpuetl.backends import get_backend

    gpu = get_backend("gpu")
    for ops in ({"lower": True}, {}):
        step = make_step("normalize_text", {"columns": ["m"], **ops}, {"m": "string"})
        want = values(step.transform(frame(m=("string", TEXTS)), CPU)["m"])
        got = step.transform(frame(gpu, m=("string", TEXTS)), gpu)["m"].to_arrow().to_pylist()
        assert got == want


def test_the_summary_states_each_options_default():
    """docs/steps.md shows the summary: each operation is named with its switch and its default,
    as the parameters' model has it (lower case is off unless asked for)."""
    import re

    from gpuetl.steps.normalize_text import NormalizeText, NormalizeTextParams

    stated = dict(re.findall(r"`(\w+)`, default (on|off)", NormalizeText.summary))
    defaults = {name: "on" if f.default else "off" for name, f in NormalizeTextParams.model_fields.items()
                if f.annotation is bool}
    assert stated == defaults and defaults["lower"] == "off"
