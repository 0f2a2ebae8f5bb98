"""``verify --report DIR``: report.md holds verify's rows and failures, report.json the whole report, and both
figures are drawn."""

import json

from pico import build

from ropebridge.convert import convert, verify
from ropebridge.convert.verdict import rows
from ropebridge.emulation import PlanRequest


def test_the_report_holds_the_rows_the_json_and_both_figures(tmp_path):
    src = build(tmp_path / "src", "bloom-4heads")
    dst = convert(src, tmp_path / "dst", PlanRequest(window=256, dtype="bfloat16")).destination
    report = verify(src, dst, context=64, greedy_tokens=0, report_dir=tmp_path / "report")
    out = tmp_path / "report"
    assert {p.name for p in out.iterdir()} == {"report.md", "report.json", "error_by_position.png",
                                               "attention_by_layer.png"}
    text = (out / "report.md").read_text()
    assert text.startswith("# ropebridge verify: PASSED")
    assert all(f"| {what} |" in text for what, _, _ in rows(report) if "|" not in what) and "| baseline |" in text
    assert json.loads((out / "report.json").read_text())["baseline_max_err"] == report.baseline_max_err
