"""The progress bar: nothing on stderr where it is not a terminal, or when disabled."""

from ropebridge._progress import progress_bar


def test_the_bar_is_silent_off_a_terminal_and_when_disabled(capsys):
    for enabled in (True, False):
        bar = progress_bar(3, "work", enabled=enabled)
        bar.update(3)
        bar.close()
    assert capsys.readouterr().err == ""
