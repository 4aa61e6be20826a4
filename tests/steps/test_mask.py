import ipaddress
import random
import uuid

import pydantic
import pytest
from hypothesis import given, settings, strategies as st

from gpuetl.steps.base import StepError
from textdata import CPU, frame, make_step, run_jsonl, values, write_jsonl

SCHEMA = {"m": "string", "n": "int64"}


def mask(texts, backend=CPU, **params):
    step = make_step("mask", {"columns": ["m"], **params}, SCHEMA)
    return values(step.transform(frame(backend, m=("string", texts)), backend)["m"])


def test_each_kind_gets_its_placeholder():
    texts = [
        "from 10.0.0.1 to 255.255.255.255",
        "v6 2001:db8::1 and fe80::1ff:fe23:4567:890a and ::1 and 2001:0db8:85a3:0000:0000:8a2e:0370:7334",
        "mail Jane.Doe+x@mail.example.co.uk now",
        "id 550e8400-e29b-41d4-a716-446655440000 ok",
        "token deadbeefcafebabe0123 short abcdef12",
        None,
        "nothing here: 12:34:56, v1.2.3",
    ]
    assert mask(texts) == [
        "from <IPV4> to <IPV4>",
        "v6 <IPV6> and <IPV6> and <IPV6> and <IPV6>",
        "mail <EMAIL> now",
        "id <UUID> ok",
        "token <HEX> short abcdef12",
        None,
        "nothing here: 12:34:56, v1.2.3",
    ]


def test_ipv4_mapped_ipv6_leaves_nothing_behind():
    assert mask(["::ffff:192.168.1.20"]) == ["<IPV6>:<IPV4>"]


def test_kinds_custom_and_placeholder():
    out = mask(["key sk-abcdefghijklmnopqrstu from 10.1.2.3 a@b.io"], kinds=["ipv4"],
               custom={"api_key": "sk-[A-Za-z0-9]{20,}"}, placeholder="[{kind}]")
    assert out == ["key [API_KEY] from [IPV4] a@b.io"]


def test_every_string_column_by_default():
    step = make_step("mask", {}, {"m": "string", "k": "string", "n": "int64"})
    df = frame(m=("string", ["1.2.3.4"]), k=("string", ["x@y.org"]), n=("int64", [1]))
    out = step.transform(df, CPU)
    assert values(out["m"]) == ["<IPV4>"] and values(out["k"]) == ["<EMAIL>"] and values(out["n"]) == [1]


@pytest.mark.parametrize("raw, message", [
    ({"kinds": ["phone"]}, "kinds"),
    ({"custom": {"x": "(?<=a)b"}}, "lookarounds|not a valid"),
    ({"custom": {"x": "a*"}}, "empty string"),
    ({"custom": {"ipv4": "x"}}, "built-in"),
    ({"custom": {"bad name": "x"}}, "letters, digits"),
    ({"placeholder": "<{kind}\\1>"}, "backslash"),
    ({"placeholder": "<{name}>"}, "only {kind}"),
    ({"kinds": []}, "nothing to mask"),
])
def test_params_are_checked(raw, message):
    with pytest.raises(pydantic.ValidationError, match=message):
        make_step("mask", {"columns": ["m"], **raw}, SCHEMA)


def test_only_string_columns():
    with pytest.raises(StepError, match="int64, not string"):
        make_step("mask", {"columns": ["n"]}, SCHEMA)


# -- never leaks -------------------------------------------------------------------------------

WORD = st.text(alphabet="abcxyz -_:;,.()[]=/@", max_size=6)


@st.composite
def secrets(draw):
    rnd = random.Random(draw(st.integers(0, 2**32)))
    kind = draw(st.sampled_from(["ipv4", "ipv6", "email", "uuid", "hex"]))
    if kind == "ipv4":
        return str(ipaddress.IPv4Address(rnd.getrandbits(32)))
    if kind == "ipv6":
        return str(ipaddress.IPv6Address(rnd.getrandbits(128)))   # compressed form, as logs print it
    if kind == "email":
        user = "".join(rnd.choice("abcdefghij0123._+-") for _ in range(rnd.randint(1, 12))).strip(".") or "u"
        return f"{user}@{rnd.choice(['example.com', 'mail.co.uk', 'x-y.org'])}"
    if kind == "uuid":
        return str(uuid.UUID(int=rnd.getrandbits(128)))
    return "".join(rnd.choice("0123456789abcdefABCDEF") for _ in range(rnd.randint(16, 40)))


@pytest.mark.slow          # 60 generated examples: ~3 s
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(WORD, secrets(), WORD), min_size=1, max_size=20))
def test_planted_secrets_never_leak(parts):
    texts = [f"{a}{s}{b}" for a, s, b in parts]
    out = mask(texts)
    for (_, secret, _), text in zip(parts, out):
        assert secret not in text, (secret, text)
        if "@" not in secret and len(secret) >= 16:      # hex tokens, uuids: no 16-char piece left
            assert not any(secret[i:i + 16] in text for i in range(len(secret) - 15)), (secret, text)


def test_an_ipv6_address_whose_first_group_an_email_takes_leaves_no_piece():
    """Found by the property above: ':@-.' before an address makes '-.e3e7' an e-mail's domain,
    and the seven groups left are masked too, not left as ':682:c209:...'."""
    secret = "e3e7:682:c209:4cac:629f:6fbe:d82c:7cd"
    (out,) = mask([f":@-.{secret}"])
    assert not any(secret[i:i + 16] in out for i in range(len(secret) - 15)), out
    assert mask(["at 12:34:56 and 10:20"]) == ["at 12:34:56 and 10:20"]     # times are not addresses


def test_mask_in_a_pipeline(tmp_path):
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"m": "login from 10.0.0.7 by bob@corp.example"}, {"m": None}])
    result, rows = run_jsonl(tmp_path, [{"mask": {"columns": ["m"]}}], {"m": "string"})
    assert [r["m"] for r in rows] == ["login from <IPV4> by <EMAIL>", None]
    assert result.counts["rows_out"] == 2


@pytest.mark.gpu
def test_gpu_matches_cpu():
    pytest.importorskip("cudf")
    from gpuetl.backends import get_backend

    gpu = get_backend("gpu")
    rnd = random.Random(0)
    texts = ["from 10.0.0.1 to ::ffff:1.2.3.4", "a@b.co", "550e8400-e29b-41d4-a716-446655440000",
             "deadbeefcafebabe0123", "2001:db8::1", None, "plain text 12:34:56"]
    texts += [str(ipaddress.IPv6Address(rnd.getrandbits(128))) for _ in range(50)]
    assert mask(texts, gpu) == mask(texts)


def test_an_address_right_before_an_at_sign_goes_whole():
    """Found by the property test above: the e-mail pattern took `7cd@-.-` and left seven of the
    IPv6 address's eight groups behind."""
    texts = ["e3e7:682:c209:4cac:629f:6fbe:d82c:7cd@-.-", "from:bob@corp.example ok", "::ffff:10.0.0.1@x.io"]
    assert mask(texts) == ["<EMAIL>", "<EMAIL> ok", "<EMAIL>"]
