"""ggmlpy's random numbers: one numpy Generator of its own (PCG64), seeded by `manual_seed`.

Layer initialisation and dropout masks draw from it; `ag_checkpoint` saves and
restores its state so a replayed segment draws the same numbers.
"""
from __future__ import annotations

import numpy as np

_gen = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed ggmlpy's random numbers (initialisation, dropout): the same seed gives the same model."""
    global _gen
    _gen = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    """ggmlpy's numpy Generator (draw from it to stay reproducible under manual_seed)."""
    return _gen


def get_rng_state() -> dict:
    """The state of ggmlpy's generator, for set_rng_state()."""
    return _gen.bit_generator.state


def set_rng_state(state: dict) -> None:
    """Restore a state from get_rng_state(): the next draws repeat."""
    _gen.bit_generator.state = state
