"""Training runs shared by the device and RPC tests (the RPC client imports this in a child process)."""
import numpy as np

import ggmlpy as g


def mlp_case(opt_name: str, steps: int = 3):
    """A small MLP trained from a fixed start: (losses, final parameters as numpy)."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(8, 32)), rng.normal(size=(4, 32))
    g.manual_seed(0)
    model = g.ag_sequential(g.ag_linear(8, 16, "relu"), g.ag_linear(16, 16, "tanh"), g.ag_linear(16, 4))
    params = model.parameters()
    opt = g.optimizer_sgd(params, lr=0.1) if opt_name == "sgd" else g.optimizer_adam(params, lr=0.01)
    X, Y = g.ag_tensor(x), g.ag_tensor(y)
    losses = []
    for _ in range(steps):
        with g.with_grad_tape():
            loss = g.ag_mse_loss(model(X), Y)
        losses.append(loss.item())
        opt.step(g.backward(loss))
        opt.zero_grad()
    return losses, [p.numpy() for p in params]
