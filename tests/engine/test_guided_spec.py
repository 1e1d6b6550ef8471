"""The typed guided-decoding spec: the dict form read into it, its checks, and the compile cache's key."""

import pytest

from engine import InvalidRequestError, SamplingParams
from engine.guided_spec import Grammar, GuidedSpec, JsonObject, JsonSchema, Regex, StructuralTag


def test_the_dict_form_reads_into_one_constraint():
    assert GuidedSpec.from_dict({"json_schema": {"type": "object"}, "strict": False, "any_whitespace": False}) == \
        GuidedSpec(JsonSchema({"type": "object"}, strict=False, any_whitespace=False))
    assert GuidedSpec.from_dict({"json_object": True}) == GuidedSpec(JsonObject())
    assert GuidedSpec.from_dict({"regex": "a+", "avoid": ["aa"]}) == GuidedSpec(Regex("a+"), avoid=("aa",))
    assert GuidedSpec.from_dict({"grammar": 'root ::= "x"'}).constraint == Grammar('root ::= "x"')
    assert SamplingParams(guided={"structural_tag": {"type": "structural_tag"}}).guided == \
        GuidedSpec(StructuralTag({"type": "structural_tag"}))


@pytest.mark.parametrize("spec", [{}, {"json_object": False}, {"regex": "a", "grammar": "b"}, {"avoid": ["x"]}])
def test_anything_but_one_kind_is_refused(spec):
    with pytest.raises(InvalidRequestError, match="exactly one of") as exc:
        GuidedSpec.from_dict(spec)
    assert exc.value.param == "guided"


@pytest.mark.parametrize("avoid", ["text", [""], [1]])
def test_avoided_texts_must_be_non_empty_strings(avoid):
    with pytest.raises(InvalidRequestError, match="avoid"):
        GuidedSpec.from_dict({"regex": "a", "avoid": avoid})


def test_the_cache_key_is_the_constraint_without_the_texts_to_avoid():
    plain = GuidedSpec(JsonSchema({"b": 1, "a": 2}))
    assert plain.key() == GuidedSpec(JsonSchema({"a": 2, "b": 1}), avoid=("x",)).key()
    assert plain.key() != GuidedSpec(JsonSchema({"a": 2, "b": 1}, any_whitespace=False)).key()
    assert GuidedSpec(Regex("a")).key() != GuidedSpec(Grammar("a")).key()
