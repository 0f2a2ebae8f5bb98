"""The conversion record: written as convert writes it, read back with its shape checked, the request DST was
converted with recovered (an older record's from its plan), and the per-head floors a plan or record carries."""

import dataclasses
import json

import pytest
from pico import build

from ropebridge.convert import convert
from ropebridge.verify.byte_check import first_difference
from ropebridge.convert.record import FILE, ConversionRecord, floors_in
from ropebridge.emulation import PlanRequest
from ropebridge.planning import plan_checkpoint


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("record")
    src = build(root / "bloom", "bloom-4heads")
    dst = convert(src, root / "bf16", PlanRequest(window=256, dtype="bfloat16")).destination
    return src, dst


def test_the_record_reads_back_to_the_bytes_convert_wrote(converted):
    _, dst = converted
    text = (dst / FILE).read_text()
    record = ConversionRecord.read(dst)
    assert record.to_json() == text  # every key, its order and its value
    assert list(json.loads(text)) == ["ropebridge_version", "source", "source_family", "source_fingerprint",
                                      "target", "dtype", "torch_version", "asked", "resolved", "geometry", "plan",
                                      "accepted_error"]
    assert record.geometry == json.loads(text)["geometry"] and record.target == "gpt-neox"
    assert "jobs" not in record.asked and "progress" not in record.asked and "jobs" not in record.resolved
    # the request as asked (what verify resolves again from SRC) and as resolved (every choice made)
    assert record.asked["dtype"] == "bfloat16" and record.asked["target"] is None
    assert record.asked["strategy"] is record.asked["tolerance"] is record.asked["cutoff"] is None
    assert (record.resolved["target"], record.resolved["strategy"], record.resolved["engine"]) == (
        "gpt-neox", "ladder", "transformers")
    assert None not in (record.resolved[k] for k in ("tolerance", "cutoff", "kernel", "head_dim"))


def test_the_request_of_a_record_and_of_an_older_one_give_the_same_plan(converted):
    src, dst = converted
    record = ConversionRecord.read(dst)
    a, _, _ = plan_checkpoint(src, record.plan_request())
    b, _, _ = plan_checkpoint(src, dataclasses.replace(record, asked=None).plan_request())  # 0.1: no request
    c, _, _ = plan_checkpoint(src, dataclasses.replace(record, asked=None, request=record.asked).plan_request())  # 0.2
    assert first_difference(b.to_dict(), a.to_dict()) is None and first_difference(c.to_dict(), a.to_dict()) is None
    assert first_difference(record.plan, {**a.to_dict(), "source": record.source}) is None


def test_a_request_in_early_0_2_names_is_read_in_today_s():
    record = ConversionRecord(plan={"heads": [{"slope": 0.5}]},
                              request={"emulation": "single", "window": 512, "dtype": "float32"})
    request = record.plan_request()
    assert request.strategy == "single" and request.window == 512


@pytest.mark.parametrize("edit, needle", [
    (lambda d: (d / FILE).unlink(), "not a ropebridge conversion (no ropebridge.json)"),
    (lambda d: (d / FILE).write_text("{"), "is not valid JSON"),
    (lambda d: (d / FILE).write_text("[]"), "has no conversion plan"),
    (lambda d: (d / FILE).write_text('{"plan": {"heads": [{"slope": "x"}]}}'), "heads are malformed"),
    (lambda d: (d / FILE).write_text('{"plan": {"heads": []}}'), "heads are malformed"),
])
def test_a_malformed_record_is_refused_naming_what(tmp_path, edit, needle):
    (tmp_path / FILE).write_text("{}")
    edit(tmp_path)
    with pytest.raises(ValueError, match="^.*" + needle.replace("(", r"\(").replace(")", r"\)")):
        ConversionRecord.read(tmp_path)


def test_a_request_convert_does_not_take_is_a_value_error():
    with pytest.raises(ValueError, match="not one convert takes"):
        ConversionRecord(plan={"heads": []}, request={"window": -1}).plan_request()
    with pytest.raises(ValueError, match="does not say how it was made"):
        ConversionRecord(plan={"heads": []}).plan_request()


def test_floors_from_a_plan_a_record_and_a_0_1_head():
    ladder = {"heads": [{"ladder": {"floor": 40}}, {"ladder": {"floor": 41.5}}]}
    assert floors_in(ladder) == floors_in({"plan": ladder}) == (40.0, 41.5)
    assert floors_in({"heads": [{"floor": 3}]}) == (3.0,)  # 0.1 kept the ladder's part on the head
    with pytest.raises(KeyError):
        floors_in({"heads": [{"slope": 1.0}]})
