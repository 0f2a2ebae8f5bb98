"""The family table: every family a row of its own module, every list of families read from it."""

from ropebridge.checkpoint.families import FAMILIES


def test_every_family_has_a_label_of_its_own_for_the_docs():
    labels = [f.label for f in FAMILIES.values()]
    assert all(labels) and len(set(labels)) == len(labels), labels


def test_every_list_of_families_is_read_from_the_table():
    import pytest

    from ropebridge.checkpoint.config import from_config
    from ropebridge.cli import build_parser
    from ropebridge.demo import data_dir
    from ropebridge.targets.engines import family_forms

    with pytest.raises(ValueError) as refused:
        from_config({"model_type": "llama"})
    assert all(t in str(refused.value) for f in FAMILIES.values() for t in f.model_types)
    plan = build_parser()._subparsers._group_actions[0].choices["plan"]
    assert next(a for a in plan._actions if a.dest == "family").choices == tuple(FAMILIES)
    shown = {form.family for _, form in family_forms()}
    assert shown == {n for n, f in FAMILIES.items() if f.forms}  # every family that heads a row, once per form
    assert all(f.forms or any(f.label in label for label, _ in family_forms()) for f in FAMILIES.values())
    for name in ("demo", "demo-mpt", "demo-falcon", "demo-baichuan", "demo-jais"):  # the block as published
        info = from_config(data_dir(name))
        assert info.block == info.family_row.block, name


def test_each_family_is_its_own_module():
    from ropebridge.checkpoint import families

    modules = {f.name: f.details.__module__ for f in FAMILIES.values()}
    assert len(set(modules.values())) == len(families.MODULES) and all(
        m.startswith("ropebridge.checkpoint.families.") for m in modules.values())
