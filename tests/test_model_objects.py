"""ag_train / ag_eval take any model object ggmlR's scripts use: an ag_* layer, a dict or list of
layers (R's list(forward = ..., parameters = ...)), a user's own class holding layers in its
attributes (R's environment), and objects with no layers at all; dp_train's model answers by
attribute as well as by key. Module is the base for one's own layers."""
import numpy as np
import pytest

import ggmlpy as g


class Plain:  # not a Module: R's environment with $training and layers inside
    def __init__(self):
        self.mha = g.ag_multihead_attention(4, 2, dropout=0.5)
        self.blocks = {"drop": g.ag_dropout(0.5), "norm": [g.ag_batch_norm(4)]}
        self.forward = lambda x: self.blocks["drop"](self.mha(x))


def _modes(obj):
    return [obj.mha.training, obj.blocks["drop"].training, obj.blocks["norm"][0].training]


def test_a_users_own_class_is_switched_all_the_way_down():
    m = Plain()
    assert g.ag_eval(m) is m
    assert _modes(m) == [False] * 3 and m.training is False  # R's default method sets $training
    g.ag_train(m)
    assert _modes(m) == [True] * 3 and m.training is True


def test_dicts_lists_and_nesting_with_cycles():
    lin, drop = g.ag_linear(2, 2), g.ag_dropout(0.3)
    model = {"layers": [lin, (drop,)], "parameters": lambda: lin.parameters(), "n": 3, "name": "m"}
    model["self"] = model  # a cycle: each object once
    g.ag_eval(model)
    assert not lin.training and not drop.training
    g.ag_train([model])
    assert lin.training and drop.training


@pytest.mark.parametrize("obj", [{}, [], {"forward": lambda x: x}, lambda x: x, 3, None, np.ones(2)])
def test_objects_without_layers_are_left_alone_quietly(obj):
    assert g.ag_train(obj) is obj and g.ag_eval(obj) is obj


def test_a_module_subclass_with_layers_in_a_dict():
    class Net(g.Module):
        def __init__(self):
            super().__init__()
            self.parts = {"a": g.ag_linear(3, 4, activation="relu"), "b": g.ag_dropout(0.5)}

        def forward(self, x):
            return self.parts["b"](self.parts["a"](x))

    net = Net()
    assert net.num_parameters() == 3 * 4 + 4 and len(net.parameters()) == 2
    g.ag_eval(net)
    assert not net.parts["b"].training
    x = np.ones((3, 2))
    np.testing.assert_array_equal(net(x).numpy(), net(x).numpy())  # eval: no dropout


def test_a_module_without_forward_says_so():
    class NoForward(g.Module):
        pass
    with pytest.raises(NotImplementedError, match="NoForward defines no forward"):
        NoForward()(np.ones((1, 1)))


def test_dp_train_model_and_result_answer_by_attribute():
    rng = np.random.default_rng(0)
    data = [{"x": rng.normal(size=(2, 1)), "y": rng.normal(size=(1, 1))} for _ in range(4)]

    def make_model():
        W = g.ag_param(rng.normal(size=(1, 2)))
        return {"forward": lambda x: g.ag_matmul(W, x), "parameters": lambda: {"W": W}}

    res = g.dp_train(make_model, data, loss_fn=g.ag_mse_loss, forward_fn=lambda m, s: m.forward(s["x"]),
                     target_fn=lambda s: s["y"], n_iter=3, verbose=False)
    assert res.loss_history is res["loss_history"] and len(res.loss_history) == 3
    assert set(res) == {"params", "loss_history", "model"}
    assert res.dropped == []  # an attribute (no replica lost), not one of ggmlR's entries
    m = res.model
    assert m.forward is m["forward"] and list(m.parameters()) == ["W"]
    g.ag_eval(m)  # a dict of functions: nothing to switch, no error
    assert m.forward(np.ones((2, 1))).shape == (1, 1)
    with pytest.raises(AttributeError, match="no entry 'backward'"):
        m.backward
