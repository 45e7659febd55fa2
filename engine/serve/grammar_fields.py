"""A request's structured output: OpenAI's ``response_format``, llama.cpp's ``json_schema``
and ``grammar`` (GBNF), read as the grammar stage's setting (no MLX, no network)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.serve.known_fields import FieldError


def read_grammar(body: Mapping[str, Any]) -> tuple[str, ...]:
    """OpenAI's ``response_format``, llama.cpp's ``json_schema`` and ``grammar`` (GBNF)."""
    fmt = body.get("response_format")
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") not in ("text", "json_object", "json_schema"):
            raise FieldError("response_format", "response_format's type must be text, json_object or json_schema.")
        if fmt["type"] == "json_object":
            return ("json", "")
        if fmt["type"] == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, Mapping) else None
            if not isinstance(schema, Mapping):
                raise FieldError(
                    "response_format", "a json_schema response_format needs json_schema.schema, an object."
                )
            return ("json_schema", json.dumps(schema))
    schema = body.get("json_schema")
    if schema is not None:
        if not isinstance(schema, Mapping):
            raise FieldError("json_schema", "json_schema must be a JSON schema object.")
        return ("json_schema", json.dumps(schema))
    grammar = body.get("grammar")
    if grammar is not None and grammar != "":
        if not isinstance(grammar, str):
            raise FieldError("grammar", "grammar must be a GBNF grammar, a string.")
        return ("gbnf", grammar)
    return ()


__all__ = ["read_grammar"]
