"""Shared by the engine workers (numpy only): an engine's logits against the transformers reference."""

import numpy as np

BLOCK = 256  # positions per block: a 250880-token vocabulary makes (s, V) float64 temporaries large


def against_references(logits: np.ndarray, references: dict[str, str]) -> dict:
    """``against_reference`` for each named reference .npy."""
    return {name: against_reference(logits, path) for name, path in references.items()}


def against_reference(logits: np.ndarray, reference_path: str) -> dict:
    """logits: (s, V') float32 from the engine; the reference (s, V) .npy is memory-mapped.

    Returns max |Δlogit| per position, the engine's argmax per position and the mean KL(reference || engine)
    per position, all computed in float64. V' < V: the engine ran the model without the zero rows that pad
    the reference's vocabulary (the demo model in a recipe: no GPT-2 vocabulary step), whose logits are
    exactly 0 (a zero row, no bias); they are compared as those zeros."""
    ref = np.load(reference_path, mmap_mode="r")
    s, v = ref.shape
    assert logits.shape[0] >= s, (logits.shape, ref.shape)
    w = min(logits.shape[1], v)
    max_abs, argmax, kl = [], [], []
    for lo in range(0, s, BLOCK):
        r = np.asarray(ref[lo:lo + BLOCK], dtype=np.float64)  # (blk, V)
        a = np.zeros_like(r)  # (blk, V): columns past the engine's vocabulary stay 0
        a[:, :w] = logits[lo:lo + len(r), :w]
        max_abs += np.abs(a - r).max(axis=1).tolist()
        argmax += a.argmax(axis=1).tolist()
        la = a - a.max(axis=1, keepdims=True)
        la -= np.log(np.exp(la).sum(axis=1, keepdims=True))
        lr = r - r.max(axis=1, keepdims=True)
        lr -= np.log(np.exp(lr).sum(axis=1, keepdims=True))
        kl += (np.exp(lr) * (lr - la)).sum(axis=1).tolist()
    return {"max_abs_by_position": max_abs, "argmax": argmax, "kl_by_position": kl}
