"""ggml's training loop, `ggml_opt_*` (ggml-opt.h), under ggmlR's names.

Every argument ggml would assert on is checked first, so misuse raises GGMLError instead of
aborting the interpreter. The Keras-like models (ggml_fit) use exactly these functions; ggmlR's
epoch loop with callbacks over them, ggml_fit_opt, is the Keras-like API's (keras/fit_opt.py).

- context.py: the loss and optimizer types, the checked settings, the optimizer context and the
  step by hand
- dataset.py, result.py: datasets (host samples as numpy views) and accumulated results
- epoch.py: one epoch with Python callbacks, and ggml's whole training run
"""
from .context import *  # noqa: F401,F403
from .dataset import *  # noqa: F401,F403
from .epoch import *  # noqa: F401,F403
from .result import *  # noqa: F401,F403

__all__ = sorted(n for n in globals() if n.startswith("ggml_opt_"))
