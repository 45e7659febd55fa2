"""What is made from the stage specs stays made from them: the docs' stage table, the
CLI flags and the SamplingParams fields (issue 20: a stage is one module)."""

from __future__ import annotations

import dataclasses

from engine.api.params import SamplingParams
from engine.cli.main import build_parser
from engine.specs import doc_table
from engine.specs.registry import FIELDS, SPECS


def test_the_stage_table_in_docs_is_the_one_the_specs_make():
    text = doc_table.ENGINE_MD.read_text(encoding="utf-8")
    assert text == doc_table.updated(text), "run: python -m engine.specs.doc_table"
    for name in SPECS:
        assert f"| `{name}` |" in text


def test_every_spec_field_is_a_sampling_param_with_its_default_and_a_cli_flag():
    params_fields = {f.name: f for f in dataclasses.fields(SamplingParams)}
    defaults = SamplingParams()
    generate = build_parser()._subparsers._group_actions[0].choices["generate"]  # noqa: SLF001
    flags = {flag for action in generate._actions for flag in action.option_strings}  # noqa: SLF001
    for name, field in FIELDS.items():
        assert name in params_fields
        assert getattr(defaults, name) == field.default
        assert field.cli_flag in flags
