"""targets.TARGETS: each entry's transformers class and config model_type agree with transformers' own."""

import transformers as T

from ropebridge.targets import TARGETS, of_model_type


def test_each_target_names_its_transformers_class_and_model_type():
    for target in TARGETS.values():
        assert getattr(T, target.architecture).config_class.model_type == target.model_type, target.name
        assert of_model_type(target.model_type) is target
    assert of_model_type("bloom") is None and of_model_type(None) is None
