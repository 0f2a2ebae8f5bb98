"""The writers' shared blocks: the rotary fraction survives the readers' truncation, the padded LayerNorm gives
the source's output on the real dims and zero on the pads, and a mean-padded writer's bytes do not depend on
its block size."""

import torch

from ropebridge.writers.blocks import mean_padded_rows, pad_rows_with_mean, padded_norm, robust_fraction


def test_rotary_fraction_survives_truncation():
    for hd in range(8, 400):
        for r in (2, 4, 6, 16):
            f = robust_fraction(r, hd + r)
            assert int((hd + r) * f) == r and round((hd + r) * f) == r


def test_a_padded_layer_norm_equals_the_source_s_on_the_real_dims():
    # a stream whose pad dims carry the mean of the real ones, normalised with eps' = eps D/D' and the folded
    # gamma, gives the source LayerNorm's output on the real dims and zero on the pads (float64 reference)
    g = torch.Generator().manual_seed(0)
    d, pads, eps = 24, 40, 1e-5
    x = torch.randn(5, d, generator=g, dtype=torch.float64) * 3 + 1
    w, b = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    padded = pad_rows_with_mean(x.T, pads).T  # (5, D'): each pad column the row's mean
    wp, bp = padded_norm(w, b, d, pads)
    out = torch.nn.functional.layer_norm(padded, (d + pads,), wp, bp, eps * d / (d + pads))
    ref = torch.nn.functional.layer_norm(x, (d,), w, b, eps)
    u64 = torch.finfo(torch.float64).eps / 2
    assert float((out[:, :d] - ref).abs().max()) <= 64 * u64 * float(ref.abs().max())
    assert torch.equal(out[:, d:], torch.zeros(5, pads, dtype=torch.float64))


def test_mean_padded_rows_do_not_depend_on_the_block_size(monkeypatch):
    import ropebridge.writers.blocks as blocks

    g = torch.Generator().manual_seed(1)
    w = torch.randn(300, 7, generator=g)

    def written(rows_per_block: int) -> torch.Tensor:
        monkeypatch.setattr(blocks, "rows_per_block", lambda _: rows_per_block)
        return torch.cat(list(mean_padded_rows(lambda a, b: w[a:b], 300, 5, 7)()))

    one, many = written(1), written(64)
    assert torch.equal(one, many) and one.shape == (305, 7)
    total = torch.zeros(7, dtype=torch.float64)
    for row in w:  # the mean as the writer defines it: a float64 sum row by row
        total.add_(row)
    assert torch.equal(one[:300], w.double()) and torch.equal(one[300:], (total / 300).expand(5, 7))
