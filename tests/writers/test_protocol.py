"""The one interface of a target's code: every writer fills each part of ``Writer`` with a function."""

import dataclasses

from ropebridge.writers import WRITERS
from ropebridge.writers.protocol import Writer


def test_every_writer_names_its_target_and_is_a_writer_of_five_functions():
    fields = [f.name for f in dataclasses.fields(Writer)]
    assert fields == ["target", "layout", "add_tensors", "config", "geometry", "shapes"]
    for name, writer in WRITERS.items():
        assert isinstance(writer, Writer) and writer.target == name, name  # the registry is keyed by the row named
        assert all(callable(getattr(writer, p)) for p in fields[1:]), name
