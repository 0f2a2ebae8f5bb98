"""The metric code of benchmarks/engines (it runs inside the engines' environments, numpy only)."""


import numpy as np


from benchmarks.engines.workers._compare import against_reference, against_references


def test_against_reference_blocks_and_kl(tmp_path):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(600, 7))  # (s, V): more positions than one block
    np.save(tmp_path / "ref.npy", ref)
    got = (ref + 1e-3 * rng.normal(size=ref.shape)).astype(np.float32)
    got[517, 3] = ref[517, 3] + 0.5  # one large error, in the third block
    out = against_reference(got, str(tmp_path / "ref.npy"))
    assert len(out["max_abs_by_position"]) == 600
    assert int(np.argmax(out["max_abs_by_position"])) == 517
    np.testing.assert_allclose(out["max_abs_by_position"][517], 0.5, rtol=1e-5,
                               err_msg="float32 logits of size ~1: 1e-5 relative covers their rounding")
    assert out["argmax"] == got.argmax(1).tolist()
    # KL(p || q) from its definition, in float64
    p = np.exp(ref) / np.exp(ref).sum(1, keepdims=True)
    q = np.exp(got.astype(np.float64)) / np.exp(got.astype(np.float64)).sum(1, keepdims=True)
    np.testing.assert_allclose(out["kl_by_position"], (p * np.log(p / q)).sum(1), rtol=1e-9, atol=1e-15,
                               err_msg="same float64 formula, different but stable evaluation order")
    assert all(k >= 0 for k in out["kl_by_position"])


def test_identical_logits_have_zero_error_and_extra_columns_are_ignored(tmp_path):
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)  # (s, V)
    np.save(tmp_path / "r.npy", ref)
    wider = np.concatenate([ref, np.full((3, 2), 99, np.float32)], axis=1)  # an engine's padded vocabulary
    out = against_references(wider, {"a": str(tmp_path / "r.npy")})["a"]
    assert out["max_abs_by_position"] == [0.0, 0.0, 0.0]
    assert out["argmax"] == [3, 3, 3]


def _row(engine, model, ratio_vs_exact, partings=(), passes=None):
    return {"engine": engine, "model": model, "ratio_vs_exact": ratio_vs_exact,
            "greedy_partings_not_near_tie": list(partings), "passes": passes, "criterion": "old"}


def test_judge_needs_the_exact_ratio_and_no_unexplained_parting():
    from benchmarks.engines.run import judge

    assert judge(1.5, [])
    assert not judge(1.51, [])
    assert not judge(0.1, [{"prompt": 0, "step": 3, "reference_margin": 2.0}])
    assert not judge(float("nan"), [])  # a NaN model never passes


def test_merge_replaces_what_ran_and_judges_the_rest_again(tmp_path):
    import json

    from benchmarks.engines.run import CRITERION, merge

    out = tmp_path / "engines.json"
    stored = [_row("llama.cpp", "demo", 0.99, passes=False),  # judged under an older criterion
              _row("ctranslate2", "demo", 1.59, passes=False),
              _row("ctranslate2", "bloom560m", 1.2, [{"prompt": 1, "step": 0, "reference_margin": 5.0}], True)]
    out.write_text(json.dumps({"machine": {}, "command": "python -m benchmarks.engines.run", "rows": stored}))
    fresh = [_row("ctranslate2", "demo", 0.06, passes=True)]
    merged = merge(fresh, out)
    by_key = {(r["engine"], r["model"]): r for r in merged}
    assert len(merged) == 3
    assert by_key["ctranslate2", "demo"] is fresh[0]
    assert by_key["llama.cpp", "demo"]["passes"] is True
    assert by_key["ctranslate2", "bloom560m"]["passes"] is False
    assert all(r["criterion"] == CRITERION for r in merged if r is not fresh[0])
    assert merge(fresh, tmp_path / "missing.json") == fresh
