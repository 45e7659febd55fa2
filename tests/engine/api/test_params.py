import math

import pytest

from engine.api.params import SamplingParams, SamplingParamsError

BAD = [
    ("temperature", -0.1),
    ("temperature", math.nan),
    ("temperature", math.inf),
    ("top_k", -1),
    ("top_k", 1.5),
    ("top_p", 0.0),
    ("top_p", 1.01),
    ("top_p", math.nan),
    ("min_p", -0.01),
    ("min_p", 1.5),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -math.inf),
    ("presence_penalty", math.nan),
    ("frequency_penalty", 101.0),
    ("penalty_window", -1),
    ("max_tokens", 0),
    ("top_logprobs", 101),
    ("top_logprobs", -1),
    ("seed", -5),
    ("temperature", "hot"),
    ("top_k", True),
]


@pytest.mark.parametrize(("field", "value"), BAD)
def test_bad_values_name_field_value_and_range(field, value):
    with pytest.raises(SamplingParamsError) as info:
        SamplingParams(**{field: value})
    assert info.value.field == field
    message = str(info.value)
    assert message.startswith(field)
    assert ("must be in" in message) or ("must be" in message)
    assert repr(value) in message or str(value) in message


def test_logit_bias_checks():
    with pytest.raises(SamplingParamsError, match="logit_bias"):
        SamplingParams(logit_bias={3: math.nan})
    with pytest.raises(SamplingParamsError, match="logit_bias"):
        SamplingParams(logit_bias={-1: 1.0})
    with pytest.raises(SamplingParamsError, match="logit_bias"):
        SamplingParams(logit_bias={"x": 1.0})
    params = SamplingParams(logit_bias={5: 2.0})
    with pytest.raises(SamplingParamsError, match=r"\[0, 4\]"):
        params.verify(5)
    params.verify(6)


def test_defaults_are_off_and_greedy():
    p = SamplingParams()
    assert p.greedy and not p.has_penalties
    assert (p.top_k, p.top_p, p.min_p, p.penalty_window, p.top_logprobs) == (0, 1.0, 0.0, 64, 10)


def test_frozen_and_round_trip():
    p = SamplingParams(temperature=0.7, logit_bias={1: -3.0}, stop=["\n\n"], seed=9)
    with pytest.raises(AttributeError):
        p.temperature = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        p.logit_bias[2] = 1.0  # type: ignore[index]
    assert SamplingParams.from_dict(p.to_dict()) == p
    assert p.with_changes(top_p=0.5).top_p == 0.5
    with pytest.raises(SamplingParamsError):
        p.with_changes(top_p=2.0)
    with pytest.raises(SamplingParamsError, match="unknown"):
        SamplingParams.from_dict({"temprature": 1.0})


def test_stop_strings_validated():
    assert SamplingParams(stop="END").stop == ("END",)
    with pytest.raises(SamplingParamsError, match="stop"):
        SamplingParams(stop=[""])
    with pytest.raises(SamplingParamsError, match="stop"):
        SamplingParams(stop=[3])
