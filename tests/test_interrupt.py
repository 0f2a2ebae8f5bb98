"""The interrupt registry: the paths being written, and the blocks a signal handler must not cut."""

import tempfile

import pytest

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


class _Stop(KeyboardInterrupt):
    pass


def _raise(signum):  # the armed CLI's action: the signal raises where the main thread is
    raise _Stop(signum)


def test_a_file_being_written_is_removed_when_its_block_raises(tmp_path):
    with pytest.raises(_Stop):
        with _interrupt.removed_if_interrupted(tmp_path / "card.tmp") as path:
            path.write_text("half")
            raise _Stop(15)
    assert list(tmp_path.iterdir()) == [] and path not in _interrupt.paths()


def test_a_signal_while_the_directory_is_made_still_removes_it(tmp_path, monkeypatch):
    """The instant between mkdtemp's return and the block that would remove its directory does not exist."""
    monkeypatch.setattr(_interrupt, "_action", [_raise])
    made = tempfile.mkdtemp

    def mkdtemp_then_a_signal(**kw):
        path = made(**kw)
        assert _interrupt.defer(15)  # arrives as mkdtemp returns: acted on once the directory is registered
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp_then_a_signal)
    with pytest.raises(_Stop):
        with _interrupt.new_directory(tmp_path, ".x.tmp-"):
            pytest.fail("the block runs after the signal")
    assert list(tmp_path.iterdir()) == [] and _interrupt.paths() == []


def test_a_second_signal_during_the_removal_waits_for_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr(_interrupt, "_action", [_raise])
    removed = _interrupt.remove

    def remove_with_a_signal_midway(path):
        assert _interrupt.defer(2)  # the second signal: kept until the removal is done
        removed(path)

    monkeypatch.setattr(_interrupt, "remove", remove_with_a_signal_midway)
    with pytest.raises(_Stop) as stop:
        with _interrupt.new_directory(tmp_path, ".x.tmp-") as tmp:
            (tmp / "shard").write_bytes(b"0" * 1000)
            raise _Stop(15)
    assert stop.value.args == (2,) and list(tmp_path.iterdir()) == []
