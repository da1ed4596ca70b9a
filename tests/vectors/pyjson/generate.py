#!/usr/bin/env python3
"""Regenerates pyjson.json: known answers for host/src/crypto/pyjson.rs.

uAgents hashes `json.dumps(value, sort_keys=True)` (indent=None, so ", " and
": " separators, ensure_ascii on) of model schemas and protocol manifests; each
case here is a value, the standard JSON text the node parses it from
(`input`; floats as "%.16e"), and what Python's json.dumps writes (`python`). Integers stay within
64 bits: the node parses JSON with serde_json, which turns larger ones into
floats before pyjson ever sees them.

The schema case is a pydantic v1 model (the `pydantic.v1` uagents-core 0.4.12
uses) with a small float default, a large bound and non-ASCII text; its digest
is uagents-core's `Model.build_schema_digest`.

    python3 tests/vectors/pyjson/generate.py > tests/vectors/pyjson/pyjson.json
"""

import hashlib
import json
import sys

from pydantic.v1 import BaseModel, Field

VALUES = [
    1e-05,
    -1e-05,
    0.0001,
    1.5e-07,
    5e-324,
    2.2250738585072014e-308,
    1e16,
    1e22,
    1.7976931348623157e308,
    123456789012345678.0,
    9999999999999998.0,
    1234567890123456.8,
    0.1,
    1.0,
    100.0,
    -0.0,
    0.0,
    2.5,
    0,
    -1,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    "caf\u00e9 \u2603 \U0001f600 \x7f \x00\x1f \"q\" \\ / \u2028",
    {"b": [1, 2.5e-9, None], "a": {"\u00e9": True, "Z": 1e100}, "": False},
    [],
    {},
]


class Reading(BaseModel):
    """Température relevée (°C)."""

    value: float = Field(1e-05, description="précision ≥ 1e-05", le=1e16)
    count: int = Field(0, ge=-(2**63), le=2**64 - 1)
    label: str = Field("naïve", title="Étiquette")


def input_text(value) -> str:
    """A float in 17 significant digits, not in the form Python writes, so a
    formatter cannot pass by echoing its input."""
    if isinstance(value, float):
        return "%.16e" % value
    return json.dumps(value)


def main() -> None:
    cases = [
        {"input": input_text(value), "python": json.dumps(value, sort_keys=True)}
        for value in VALUES
    ]
    schema = Reading.schema_json(indent=None, sort_keys=True)
    schema_case = {
        "schema_json": schema,
        "schema_digest": "model:" + hashlib.sha256(schema.encode("utf8")).hexdigest(),
    }
    json.dump(
        {
            "generator": "tests/vectors/pyjson/generate.py",
            "python": sys.version.split()[0],
            "cases": cases,
            "schema": schema_case,
        },
        sys.stdout,
        indent=2,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
