"""The row every family fills: its details typed once, and the helpers that read a config's keys."""

import pytest

from ropebridge.checkpoint.families.row import first, positive_key


def test_a_family_s_details_are_typed_and_give_the_source_s_fields():
    from ropebridge.checkpoint.config import SourceInfo
    from ropebridge.checkpoint.families import FamilyDetails

    details = FamilyDetails(max_bias=8, eps="1e-5", intermediate_size=256.0, qk_scale=1, kv_heads=1.0)
    assert (details.eps, details.intermediate_size, details.qk_scale, details.kv_heads) == (1e-5, 256, 1.0, 1)
    assert type(details.intermediate_size) is int and FamilyDetails(max_bias=8, eps=1, intermediate_size=1,
                                                                   qk_scale=1).kv_heads is None
    given = details.source_fields()
    assert "max_bias" not in given and "kv_heads" not in given and set(given) <= set(SourceInfo.__dataclass_fields__)
    with pytest.raises(TypeError):
        FamilyDetails(8.0, 1e-5, 256, 1.0)  # keywords only, as a family's row gives them


def test_a_config_key_is_a_positive_number_or_its_default():
    assert positive_key({}, "eps", 1e-5) == 1e-5 and positive_key({"eps": None}, "eps", 2, null_is_default=True) == 2
    for bad in ({"eps": "x"}, {"eps": True}, {"eps": 0}, {"eps": None}):
        with pytest.raises(ValueError, match="eps"):
            positive_key(bad, "eps", 1e-5)


def test_the_first_key_present_and_two_that_disagree_refused():
    assert first({"b": 2, "a": None}, ("a", "b")) == 2 and first({}, ("a",)) is None
    assert first({"a": 1, "b": 1}, ("a", "b")) == 1
    with pytest.raises(ValueError, match="a = 1 and b = 2 disagree"):
        first({"a": 1, "b": 2}, ("a", "b"))


@pytest.mark.parametrize("field, value, words", [
    ("qkv_layout", "per_head", "qkv_layout 'per_head' must be one of"),
    ("attention", "flash", "attention 'flash' must be one of"),
    ("block", "rmsnorm", "block 'rmsnorm' must be one of"),
    ("heads", (), "heads () must be a non-empty tuple"),
    ("model_types", "bloom", "model_types 'bloom' must be a non-empty tuple"),
    ("details", None, "details None must be callable"),
    ("transposed", 1, "transposed 1 must be True or False"),
    ("forms", (("BLOOM", "no"),), "must be (label, parallel residual) pairs"),
    ("default_target", "", "default_target '' must be a non-empty string"),
])
def test_a_family_row_is_checked_on_construction(field, value, words):
    import dataclasses

    from ropebridge.checkpoint.families import FAMILIES

    for row in FAMILIES.values():  # every row as shipped passes
        dataclasses.replace(row)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")) as err:
        dataclasses.replace(FAMILIES["bloom"], **{field: value})
    assert "family 'bloom'" in str(err.value)


def test_the_block_kinds_are_the_ones_the_targets_carry():
    from ropebridge.checkpoint.families.row import BLOCK_KINDS
    from ropebridge.targets import BLOCKS

    assert set(BLOCKS) == set(BLOCK_KINDS)
