"""ggmlpy's random numbers: one numpy Generator of its own (PCG64), seeded by `manual_seed`.

Layer initialisation and dropout masks draw from it; `ag_checkpoint` saves and
restores its state so a replayed segment draws the same numbers.
"""
from __future__ import annotations

import numpy as np

_gen = np.random.default_rng()


def manual_seed(seed: int) -> None:
    global _gen
    _gen = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _gen


def get_rng_state() -> dict:
    return _gen.bit_generator.state


def set_rng_state(state: dict) -> None:
    _gen.bit_generator.state = state
