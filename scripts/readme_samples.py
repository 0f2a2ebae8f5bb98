"""Sample outputs in README.md and docs/: regenerate them, or check them (``tests/repo/test_readme_samples.py``;
``python -m benchmarks.tables --samples`` runs this beside the tables).

    python scripts/readme_samples.py          # rewrite every sample block from a fresh run
    python scripts/readme_samples.py --check  # exit 1 where a sample no longer matches

A sample is a fenced block whose first line is ``$ ropebridge …`` and that is preceded by the line
``<!-- sample -->``. Each file's commands run in order in one temporary directory, as a reader would type
them (``ropebridge demo --out demo-out`` leaves the models the next samples convert and verify; ``--plot``
files land there too); long outputs keep their first ``HEAD`` and last ``TAIL`` lines around a `` ...`` line. Matching
is line by line: the same words, and numbers within ``REL`` relative (times, which vary from run to run (`12ms`,
`2.4s`), only in form). A sample that measures a model run in half precision (``verify``'s header names the dtype)
compares its numbers within ``HALF_REL[dtype]``, the square root of the dtype's unit roundoff: the CPU's
kernels decide how a bfloat16 product rounds (oneDNN's ISA, PyTorch's attention kernel), and a statistic of
such logits (a max over a million of them) reproduces from one machine to another to about half the dtype's
digits (measured: up to 3.4% between two CI machines for the README's bfloat16 verify, 0.9% across oneDNN's
ISAs on one). The plan's numbers, computed in float64, keep ``REL`` in any dtype.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = "<!-- sample -->"
HEAD, TAIL, LONG = 3, 3, 18
REL = 1e-3
HALF_REL = {"bfloat16": 2.0**-4, "float16": 2.0**-5.5}  # sqrt(unit roundoff): 2^-8, 2^-11
_MEASURED_IN = re.compile(r" vs converted, (bfloat16|float16), ")  # verify's header line
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_TIME = re.compile(r"^\d+(\.\d+)?m?s$")


def blocks(text: str) -> list[tuple[int, int, str]]:
    """(first line index of the output, end index (the closing fence), command) of every sample block."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() == MARK and i + 2 < len(lines) and lines[i + 1].startswith("```") \
                and lines[i + 2].startswith("$ ropebridge "):
            end = next(j for j in range(i + 3, len(lines)) if lines[j].startswith("```"))
            out.append((i + 3, end, lines[i + 2][2:]))
    return out


def run(command: str, work: str | Path | None = None) -> list[str]:
    """The command's stdout lines, run through ``ropebridge.cli.main`` in ``work`` (default: a temporary
    directory of its own)."""
    from ropebridge.cli import main

    if work is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run(command, tmp)
    argv = command.split()[1:]
    buffer = io.StringIO()
    here = os.getcwd()
    os.chdir(work)
    try:
        with contextlib.redirect_stdout(buffer):
            status = main(argv)
    finally:
        os.chdir(here)
    if status != 0:
        raise RuntimeError(f"{command!r} exited {status}")
    return buffer.getvalue().rstrip("\n").splitlines()


def elide(lines: list[str]) -> list[str]:
    return lines if len(lines) <= LONG else lines[:HEAD] + [" ..."] + lines[-TAIL:]


def _tokens(line: str) -> list[str]:
    return re.split(r"[\s,;()=]+", line.strip())


def _same_token(a: str, b: str, rel: float = REL) -> bool:
    if a == b or (_TIME.match(a) and _TIME.match(b)):
        return True
    a, b = a.rstrip("%"), b.rstrip("%")
    if _NUMBER.match(a) and _NUMBER.match(b):
        x, y = float(a), float(b)
        if abs(x) < 1e-3 and abs(y) < 1e-3:  # rounding-level numbers: the same order of magnitude
            return (x == y == 0) or (x != 0 and y != 0 and 0.5 <= abs(x / y) <= 2)
        if rel != REL and a.isdigit():  # a count or a constant in a half-precision sample (tokens, threshold)
            return False
        return abs(x - y) <= rel * max(abs(x), abs(y))
    return False


def tolerance(expected: list[str]) -> float:
    """The relative tolerance of a sample's numbers: ``HALF_REL`` where its header says it measures a model run
    in half precision, else ``REL``."""
    measured = _MEASURED_IN.search(expected[0]) if expected else None
    return HALF_REL[measured.group(1)] if measured else REL


def mismatches(expected: list[str], actual: list[str]) -> list[str]:
    """Where the README's lines differ from an actual output (elided parts skipped)."""
    problems, rel = [], tolerance(expected)
    if " ..." in expected:
        k = expected.index(" ...")
        pairs = list(zip(expected[:k], actual[:k])) + list(zip(expected[k + 1:][::-1], actual[::-1]))[::-1]
        if len(actual) < len(expected) - 1:
            problems.append(f"{len(actual)} lines, the sample shows more")
    else:
        pairs = list(zip(expected, actual))
        if len(expected) != len(actual):
            problems.append(f"{len(actual)} lines, the sample has {len(expected)}")
    for want, got in pairs:
        if want.rstrip().endswith("s;") or " in " in want and " s;" in want:  # a timing clause
            want, got = re.sub(r"in \d+\.\d+ s;", "", want), re.sub(r"in \d+\.\d+ s;", "", got)
        a, b = _tokens(want), _tokens(got)
        if len(a) != len(b) or not all(_same_token(x, y, rel) for x, y in zip(a, b)):
            problems.append(f"README: {want!r}\n   now: {got!r}")
    return problems


def main(argv: list[str]) -> int:
    failed = 0
    for path in FILES:
        with tempfile.TemporaryDirectory() as work:
            outputs = {command: run(command, work) for _, _, command in blocks(path.read_text())}
        text = path.read_text()  # read again: the file may have been edited while the commands ran
        lines = text.splitlines()
        for first, end, command in reversed(blocks(text)):
            actual = outputs[command]
            if "--check" in argv:
                problems = mismatches(lines[first:end], actual)
                for p in problems:
                    print(f"{path.name}: {command}: {p}")
                failed += bool(problems)
            else:
                lines[first:end] = elide(actual)
                print(f"updated: {path.name}: {command}", file=sys.stderr)
        if "--check" not in argv and blocks(text):
            path.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
