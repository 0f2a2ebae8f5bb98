"""Every numeric option of every subcommand against numbers that parse but mean nothing (nan, infinities, 1e400,
negatives, zero where it is no value, integers past any limit, beyond float's range and beyond int64): exit 2, one line
on stderr naming the option, no traceback, nothing written. Generated from the options as the parser declares them, so a
numeric option added without the shared validator (``cli._options.numeric``) fails here."""

import argparse

import pytest

from ropebridge.cli import build_parser, main
from ropebridge.demo import data_dir

# the last three are finite but beyond what a float or an int64 holds, or overflow downstream: each ran (or was
# refused) in one line, never a traceback (OverflowError, int64_t)
HUGE = ("99999999999999999999999", "9223372036854775808", "1" + "0" * 400, "-1" + "0" * 400, "1e308")
BAD = ("nan", "inf", "-inf", "1e400", "-1")
ZERO_OK = {("verify", "--greedy-tokens"), ("rope", "--seq-len")}  # 0 greedy tokens: none; a sequence of 0 tokens
STRING_NUMBERS = {"--floor", "--split"}  # a number or a file / 'sqrt': validated by the library, as numbers here


def _numeric_options() -> list[tuple[str, str]]:
    """(subcommand, option) for every option whose argparse type parses numbers, and the string ones above."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        for action in p._actions:
            flag = next((o for o in action.option_strings if o.startswith("--")), None)
            if flag is None:
                continue
            numeric = getattr(action.type, "__name__", "") in ("integer", "number", "_floats") or flag in STRING_NUMBERS
            bare = action.type in (int, float)
            assert not bare, f"ropebridge {name} {flag} parses with bare {action.type.__name__}: use numeric()"
            if numeric:
                out.append((name, flag))
    return out


OPTIONS = _numeric_options()
BASE = {"plan": ["plan", "--heads", "4", "--head-dim", "32"], "rope": ["rope", "--head-dim", "64", "--context", "128"],
        "demo": ["demo"], "verify": ["verify", "SRC", "DST"], "convert": ["convert", "SRC", "DST"]}


def test_the_sweep_covers_every_numeric_option():
    assert len(OPTIONS) >= 25
    for flag in ("--window", "--max-memory", "--greedy-tokens", "--max-shard-mb", "--jobs", "--floor", "--split"):
        assert any(f == flag for _, f in OPTIONS), flag


@pytest.mark.parametrize("command, flag", OPTIONS, ids=[f"{c} {f}" for c, f in OPTIONS])
def test_a_meaningless_number_is_one_line_and_exit_2(tmp_path, capsys, command, flag):
    dst = tmp_path / "dst"
    argv = [str(data_dir()) if a == "SRC" else str(dst) if a == "DST" else a for a in BASE[command]]
    values = BAD + HUGE + (() if (command, flag) in ZERO_OK else ("0",))
    if flag == "--split":
        values = ("nan", "inf", "-1", "0", "1e400")
    for value in values:
        extra = ["--strategy", "single", "--dtype", "float16"] if flag == "--split" else []
        status = main([*argv, *extra, f"{flag}={value}"])
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) <= 1, (flag, value, err)
        if value in HUGE:  # a huge finite number some options take: it ran (or stopped later, in one line)
            assert status in (0, 1, 2), (flag, value, err)
        else:
            assert status == 2 and (flag in err or flag.lstrip("-").replace("-", "_") in err), (flag, value, err)
            assert not dst.exists(), (flag, value)
        if dst.exists():
            import shutil

            shutil.rmtree(dst)
