"""The zero-copy numpy fast path: ggml ops on numpy arrays without copies."""
import numpy as np
import pytest

import ggmlpy as g
from ggmlpy.autograd import eager_numpy as E

rng = np.random.default_rng(4)


@pytest.mark.parametrize("op,ref", [(E.add, np.add), (E.sub, np.subtract), (E.mul, np.multiply)])
@pytest.mark.parametrize("yshape", [(5, 7), (1, 7), (5, 1), (1, 1)])
def test_elementwise_with_ggml_broadcasting(op, ref, yshape):
    x, y = rng.random((5, 7), dtype=np.float32), rng.random(yshape, dtype=np.float32)
    np.testing.assert_allclose(op(x, y), ref(x, y), rtol=1e-6)


def test_inputs_are_not_copied_and_results_are_fresh():
    x, y = np.ones((4, 4), np.float32), np.ones((4, 4), np.float32)
    a = E.add(x, y)
    x[:] = 5  # the next call reads the array's memory as it is now
    b = E.add(x, y)
    assert a[0, 0] == 2 and b[0, 0] == 6 and a is not b


def test_other_dtypes_and_layouts_are_converted():
    x = np.arange(12.0).reshape(3, 4)       # float64
    y = np.ones((4, 3), np.float32).T       # not C-contiguous
    np.testing.assert_allclose(E.add(x, y), x + 1)


def test_bad_shapes_are_clear_errors():
    with pytest.raises(g.GGMLError, match="does not broadcast"):
        E.add(np.ones((3, 4), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(g.GGMLError, match="non-empty 1-d or 2-d"):
        E.add(np.ones((2, 2, 2), np.float32), np.ones((2, 2, 2), np.float32))
