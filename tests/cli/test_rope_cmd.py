"""``ropebridge rope``: table, JSON, plot and bad input through ``main(argv)``."""

import json

import pytest

from ropebridge.cli import main


def test_table_and_summary(capsys):
    assert main(["rope", "--head-dim", "128", "--base", "10000", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "18 of 64 pairs never complete a turn within 4096 tokens" in out
    assert out.splitlines()[0].split()[:4] == ["pair", "inv_freq", "wavelength", "turns"]


def test_json(capsys):
    assert main(["rope", "--head-dim", "128", "--context", "4096", "--rope-type", "yarn", "--factor", "4",
                 "--original-max-position", "4096", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pairs_without_full_turn"] == 18
    assert len(data["pairs"]) == 64
    assert {"index", "inv_freq", "wavelength", "turns_in_context"} <= set(data["pairs"][0])
    assert data["pairs"][-1]["scaled_inv_freq"] == pytest.approx(data["pairs"][-1]["inv_freq"] / 4)


def test_plot(tmp_path):
    png = tmp_path / "w.png"
    assert main(["rope", "--head-dim", "64", "--context", "2048", "--rope-type", "linear", "--factor", "2",
                 "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--head-dim", "127", "--context", "10"], "--head-dim"),
        (["--head-dim", "0", "--context", "10"], "--head-dim"),
        (["--head-dim", "64", "--context", "-1"], "--context"),
        (["--head-dim", "64", "--context", "10", "--base", "1"], "--base"),
        (["--head-dim", "64", "--context", "10", "--rope-type", "warp"], "--rope-type"),
        (["--head-dim", "64", "--context", "10", "--rope-type", "linear"], "factor"),
        (["--head-dim", "64", "--context", "10", "--rope-type", "linear", "--factor", "0.5"], "factor"),
        (["--head-dim", "64", "--context", "10", "--rope-type", "yarn", "--factor", "2"], "--original-max-position"),
        (["--head-dim", "64", "--context", "10", "--factor", "8"], "--factor is not used by --rope-type default"),
        (["--head-dim", "64", "--context", "10", "--rope-type", "linear", "--factor", "2", "--beta-fast", "4"],
         "--beta-fast is not used"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    assert main(["rope", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_argparse_errors_exit_2(capsys):
    assert main(["rope", "--head-dim", "x", "--context", "4"]) == 2  # a status, not a SystemExit
    err = capsys.readouterr().err
    assert "--head-dim" in err and len(err.strip().splitlines()) == 1
