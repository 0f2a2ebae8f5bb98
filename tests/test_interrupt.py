"""The interrupt registry: the paths being written, and the blocks a signal handler must not cut."""

from ropebridge import _interrupt


def test_a_path_is_registered_only_while_it_is_written(tmp_path):
    with _interrupt.removed_if_interrupted(tmp_path / "a") as a:
        assert _interrupt.paths()[-1] == a
    assert tmp_path / "a" not in _interrupt.paths()


def test_a_signal_in_an_uninterrupted_block_is_acted_on_when_it_ends(monkeypatch):
    acted = []
    monkeypatch.setattr(_interrupt, "_action", [acted.append])
    assert not _interrupt.defer(2)  # outside a block: the handler acts at once
    with _interrupt.uninterrupted():
        with _interrupt.uninterrupted():
            assert _interrupt.defer(15)
        assert acted == []  # the outer block still runs
    assert acted == [15]
