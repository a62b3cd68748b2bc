"""Reverse-mode autodiff on a tape, with ggmlR's ag_* API."""
from .checkpoint import CheckpointReplayError, ag_checkpoint
from .engine import GradMap, backward, zero_grad
from .forward_ad import dual_level, enter_dual_level, exit_dual_level, make_dual, unpack_dual
from .transforms import hvp, jacfwd, jvp
from .gradcheck import ag_gradcheck
from .graph_backward import ag_backward_graph
from .graph_mode import ag_compile
from .ops import *  # noqa: F401,F403
from .ops import __dict__ as _ops_ns
from .tape import no_grad, tape_bytes, tape_report, with_grad_tape
from . import tensor_methods

tensor_methods.install()  # AGTensor's operators, .T, .backward() and indexing are ag_* calls

# the ag_* functions ops.py defines (not those it imports, such as ag_tensor)
ag_ops = sorted(n for n, v in _ops_ns.items()
                if n.startswith("ag_") and getattr(v, "__module__", None) == __name__ + ".ops")

__all__ = ["CheckpointReplayError", "GradMap", "ag_backward_graph", "ag_checkpoint", "ag_compile", "ag_gradcheck",
           "backward", "dual_level", "enter_dual_level", "exit_dual_level", "hvp", "jacfwd", "jvp", "make_dual",
           "no_grad", "tape_bytes", "tape_report", "unpack_dual", "with_grad_tape", "zero_grad", "ag_ops"] + ag_ops
