"""Port of ggmlR's tests/testthat/test-5d-ops.R (ggmlR 0.8.2).

ggmlR bundles a ggml fork with GGML_MAX_DIMS = 5; ggmlpy is pinned to ggml 0.25.3, whose tensors
have at most 4 dims. The 5-D blocks (6 unary ops, 4 binary ops, concat on 5 axes) cannot exist
there (listed below), and ggmlpy's behaviour for a 5-D request
(a clear error, not a silently truncated tensor) is tested instead.

Blocks of ggmlR's file not ported, and why:
- "5D unary <op> covers ne[4]"; "5D binary <op> covers ne[4]"; "5D concat axis <ax> covers ne[4]": ggmlR's
  ggml fork has 5-D tensors; ggml 0.25.3 has GGML_MAX_DIMS = 4.
"""
import pytest

from ggmlpy import *  # noqa: F401,F403
from ggmlpy import GGMLError

from .rlike import *  # noqa: F401,F403

NE = [3, 2, 2, 2, 3]  # ne4 = 3 is the point of ggmlR's test


def test_5d_tensors_are_refused_clearly():
    """ggmlpy: a 5-D tensor request raises, naming the limit (ggml would assert)."""
    ctx = ggml_init(32 * 1024 * 1024, no_alloc=True)
    with pytest.raises(GGMLError, match="n_dims must be 1..4"):
        ggml_new_tensor(ctx, GGML_TYPE_F32, 5, NE)
    assert GGML_MAX_DIMS == 4
    ggml_free(ctx)
