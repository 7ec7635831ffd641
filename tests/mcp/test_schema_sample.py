"""Tool arguments sampled from hand-made JSON Schemas: every sample validates, and each source of values is used."""

from __future__ import annotations

import random
import re

import jsonschema
import pytest

from art_mcp.schema_sample import Sampler, SchemaError, ValuePool, description_hints, sample_arguments

NESTED = {
    "type": "object",
    "properties": {
        "unit": {"type": "string", "enum": ["m", "km", "mi"]},
        "mode": {"const": "fast"},
        "count": {"type": "integer", "minimum": 3, "maximum": 30, "multipleOf": 3},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "when": {"type": "string", "format": "date"},
        "stamp": {"type": "string", "format": "date-time"},
        "contact": {"type": "string", "format": "email"},
        "ref": {"type": "string", "format": "uuid"},
        "name": {"type": "string", "minLength": 5, "maxLength": 12},
        "owner": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["a", "b", "c"]},
                    "minItems": 1,
                    "maxItems": 3,
                    "uniqueItems": True,
                },
                "address": {"$ref": "#/$defs/Address"},
            },
            "required": ["id", "tags", "address"],
        },
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        "flag": {"type": "boolean"},
        "points": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}, "maxItems": 2},
    },
    "required": ["unit", "mode", "count", "ratio", "when", "stamp", "contact", "ref", "name", "owner", "flag"],
    "$defs": {
        "Address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "examples": ["10115"]}},
            "required": ["city", "zip"],
        }
    },
}


def test_every_sample_of_a_nested_schema_validates():
    rng = random.Random(0)
    samples = [sample_arguments(NESTED, rng=rng) for _ in range(200)]
    for s in samples:
        jsonschema.validate(s, NESTED, format_checker=jsonschema.FormatChecker())
        assert s["mode"] == "fast" and s["count"] % 3 == 0 and 0 < s["ratio"] < 1
        assert re.fullmatch(r"2024-\d\d-\d\d", s["when"]) and s["contact"].endswith("@example.com")
        assert len(set(s["owner"]["tags"])) == len(s["owner"]["tags"])
    # every enum value, both optional-property outcomes, and the schema's example all turn up
    assert {s["unit"] for s in samples} == {"m", "km", "mi"}
    assert any("note" in s for s in samples) and any("note" not in s for s in samples)
    assert "10115" in {s["owner"]["address"]["zip"] for s in samples}
    assert len({s["owner"]["address"]["zip"] for s in samples}) > 2  # not only the example


def test_sampling_is_seeded():
    assert sample_arguments(NESTED, rng=random.Random(7)) == sample_arguments(NESTED, rng=random.Random(7))
    assert sample_arguments(NESTED, rng=random.Random(7)) != sample_arguments(NESTED, rng=random.Random(8))


def test_values_seen_in_earlier_results_fill_matching_arguments():
    pool = ValuePool()
    pool.add({"result": [{"id": 3, "title": "groceries"}, {"id": 5, "title": "dentist"}]})
    assert pool.matching("note_id") == [3, 5] and pool.matching("noteId") == [3, 5]
    assert pool.matching("title") == ["groceries", "dentist"] and pool.matching("count") == []
    schema = {"type": "object", "properties": {"note_id": {"type": "integer"}}, "required": ["note_id"]}
    rng = random.Random(1)
    ids = [Sampler(schema, rng=rng).arguments(pool)["note_id"] for _ in range(50)]
    assert set(ids) >= {3, 5} and sum(i in (3, 5) for i in ids) >= 30  # mostly ids that exist


def test_description_hints_give_strings_the_schema_does_not():
    description = 'Evaluate an arithmetic expression, e.g. "(3 + 4) * 2". Units: length (m km cm).'
    assert description_hints(description) == ["(3 + 4) * 2", "m", "km", "cm"]
    schema = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
    rng = random.Random(0)
    seen = {Sampler(schema, description=description, rng=rng).arguments()["expression"] for _ in range(60)}
    fresh = [e for e in seen if re.fullmatch(r"\(\d \+ \d\) \* \d", e)]
    assert len(fresh) > 5  # the example with new numbers, many times over
    assert {"m", "km", "cm"} & seen


def test_unsampleable_schemas_raise_a_clear_error():
    with pytest.raises(SchemaError, match="cannot follow \\$ref '#/\\$defs/Missing'"):
        sample_arguments({"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}, "required": ["x"]})
    with pytest.raises(SchemaError, match="no integer between 1 and 2 is a multiple of 5"):
        sample_arguments(
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 2, "multipleOf": 5}},
             "required": ["n"]}
        )  # fmt: skip
    with pytest.raises(SchemaError, match="not an object schema"):
        sample_arguments({"type": "string"})


def test_single_quoted_examples_and_written_formats_give_strings():
    zone = "IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use 'UTC' if the user's zone is unknown."
    assert description_hints(zone) == ["America/New_York", "Europe/London", "UTC"]  # not the apostrophe
    schema = {"type": "object", "required": ["zone", "time", "day", "stamp"], "properties": {
        "zone": {"type": "string", "description": zone},
        "time": {"type": "string", "description": "Time to convert in 24-hour format (HH:MM)"},
        "day": {"type": "string", "description": "The day, as YYYY-MM-DD."},
        "stamp": {"type": "string", "description": "When: YYYY-MM-DDTHH:MM:SS"}}}  # fmt: skip
    rng = random.Random(0)
    for _ in range(30):
        args = Sampler(schema, rng=rng).arguments()
        assert re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", args["time"]), args
        assert re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])", args["day"]), args
        assert re.fullmatch(r"20\d\d-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-5]\d", args["stamp"]), args
    zones = {Sampler(schema, rng=rng).arguments()["zone"] for _ in range(40)}
    assert {"America/New_York", "Europe/London", "UTC"} & zones and "s zone is unknown." not in zones
