"""ggmlR's ggml_* op constructors, each checked before it reaches ggml, by family.

ggml asserts (and so aborts the process) on shapes, types and context memory it
cannot handle. Every constructor here validates its inputs against the same
conditions first and raises GGMLError instead: its arguments, types and strides
here, the shape rule of each ggml op in core/checked.py (the one table every
front end uses). The kernels are ggml's own.

Naming and argument order follow ggml's C API (and so ggmlR's R functions):
`ggml_add(ctx, a, b)`, `ggml_soft_max_ext(ctx, a, mask, scale, max_bias)`.

- args.py: what every constructor shares (checked arguments, the tensor it makes, ggml.h's limits)
- elementwise.py, products.py, views.py, assemble.py, reductions.py: element-wise ops, matrix
  products, views and copies, tensors assembled from others, ops along rows
- conv_pool.py, attention.py, rope_glu.py: convolution and pooling, softmax and attention, RoPE and GLU
- inplace.py: the `*_inplace` variants, one table
"""
from .args import *  # noqa: F401,F403
from .args import can_repeat  # noqa: F401
from .assemble import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .conv_pool import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .inplace import *  # noqa: F401,F403
from .products import *  # noqa: F401,F403
from .reductions import *  # noqa: F401,F403
from .rope_glu import *  # noqa: F401,F403
from .views import *  # noqa: F401,F403

__all__ = sorted(n for n in globals() if n.startswith(("ggml_", "GGML_")))
OPS = sorted(n for n in __all__ if n.startswith("ggml_"))  # every op constructor (the fuzz test covers them)
