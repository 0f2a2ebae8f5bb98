"""The gpt-neox writer: its rotary fraction survives the readers' truncation."""


from ropebridge.writers.gpt_neox import robust_fraction


def test_rotary_fraction_survives_truncation():
    for hd in range(8, 400):
        for r in (2, 4, 6, 16):
            f = robust_fraction(r, hd + r)
            assert int((hd + r) * f) == r and round((hd + r) * f) == r
