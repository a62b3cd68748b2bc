"""Whole models exported from PyTorch (random weights, TorchScript exporter) against onnxruntime.

Each model runs through onnx_load/onnx_run on the CPU and must match onnxruntime
within rtol 1e-4 / atol 1e-5 (float32). Small sizes keep each under a second on CI.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="exports the models with PyTorch: pip install torch==2.13.0 "
                                    "--index-url https://download.pytorch.org/whl/cpu")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import ggmlpy.onnx as go  # noqa: E402

nn = torch.nn
RTOL, ATOL = 1e-4, 1e-5
# Vulkan's matrix kernels accumulate in f16 on lavapipe (measured errors below 2e-3); CUDA's fast-math
# kernels differ from the CPU's by about 1e-6 relative.
DEVICE_TOL = {"cpu": (RTOL, ATOL), "vulkan": (1e-2, 5e-3), "cuda": (1e-3, 1e-4)}


def export(model, args, path, input_names, output_names=("y",), dynamic_axes=None, opset=17):
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=list(input_names),
                          output_names=list(output_names), opset_version=opset, dynamic_axes=dynamic_axes)
    return str(path)


def reference(path, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def check(path, feeds, rtol=None, atol=None, device="cpu", **load):
    if rtol is None:
        rtol, atol = DEVICE_TOL[device]
    model = go.onnx_load(path, device=device, **load)
    got = go.onnx_run(model, feeds)
    want = reference(path, feeds)
    for name, w in want.items():
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
    return model, got


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_mlp(tmp_path, device):
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10),
                      nn.Softmax(dim=-1))
    x = torch.randn(5, 32)
    p = export(m, (x,), tmp_path / "mlp.onnx", ["x"])
    model, got = check(p, {"x": x.numpy()}, device=device)
    # a second call with the same shapes reuses the built graph
    got2 = go.onnx_run(model, {"x": x.numpy()})
    np.testing.assert_array_equal(got["y"], got2["y"])
    assert len(model._plans) == 1
    assert next(iter(model._plans.values())).n_fused == 1  # the exported GELU runs as ggml_gelu_erf


class Block(nn.Module):
    """A ResNet basic block with a strided projection shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.short(x))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.layers = nn.Sequential(Block(8, 8, 1), Block(8, 16, 2), Block(16, 32, 2))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def _randomize_bn(m):
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)


def test_resnet_style_cnn(tmp_path, device):
    m = SmallResNet()
    _randomize_bn(m)
    x = torch.randn(2, 3, 32, 32)
    p = export(m, (x,), tmp_path / "resnet.onnx", ["image"])
    model, _ = check(p, {"image": x.numpy()}, device=device)
    s = go.onnx_summary(model)
    assert {"Conv", "MaxPool", "Add", "Relu", "Gemm"} <= set(s["ops"])


class Encoder(nn.Module):
    """A BERT-style encoder: embeddings, attention with a padding mask, LayerNorm, GELU MLP."""

    def __init__(self, vocab=50, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 64, dropout=0.0, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, ids, mask):
        h = self.tok(ids) + self.pos[:, :ids.shape[1]]
        return self.norm(self.enc(h, src_key_padding_mask=mask == 0))


def test_transformer_encoder_with_mask(tmp_path, device):
    m = Encoder()
    ids = torch.randint(0, 50, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 11:] = 0
    p = export(m, (ids, mask), tmp_path / "bert.onnx", ["ids", "mask"])
    check(p, {"ids": ids.numpy(), "mask": mask.numpy()}, device=device)


class ViT(nn.Module):
    """A pre-norm vision transformer whose head reads the class token (as timm's and torchvision's do)."""

    def __init__(self, d=16, patch=8, image=32, layers=2, heads=2):
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.1)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(x.shape[0], -1, -1), t], 1) + self.pos
        return self.head(self.enc(t)[:, 0])


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("dynamo", [False, True])
def test_vit_computes_its_last_layer_for_the_class_token(tmp_path, batch, dynamo, device):
    """The last layer's MLP, attention output and layer norm run for the one token the head reads
    (onnx/narrowing.py), with both of torch's exporters, and the numbers stay onnxruntime's."""
    if dynamo:
        pytest.importorskip("onnxscript")
    m = ViT().eval()
    x = torch.randn(batch, 3, 32, 32)
    p = str(tmp_path / "vit.onnx")
    if dynamo:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, (x,), p, dynamo=True, verbose=False, input_names=["image"], output_names=["y"])
    else:
        export(m, (x,), p, ["image"])
    model, _ = check(p, {"image": x.numpy()}, device=device)
    narrowed = model.graph_for(model.input_shapes).narrowed
    ops = {n.op_type for n in model.proto.graph.node if n.output[0] in narrowed}
    assert {"MatMul", "LayerNormalization", "Softmax"} <= ops
    assert go.onnx_summary(model)["narrowed_nodes"] == len(narrowed)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.d2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.up2 = nn.ConvTranspose2d(16, 16, 2, stride=2)
        self.u2 = nn.Sequential(nn.Conv2d(32, 8, 3, padding=1), nn.ReLU())
        self.u1 = nn.Sequential(nn.Conv2d(16, 4, 3, padding=1), nn.Sigmoid())

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(a)
        c = self.mid(b)
        y = self.u2(torch.cat([self.up2(c), b], 1))
        y = nn.functional.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return self.u1(torch.cat([y, a], 1))


def test_unet_convtranspose_resize(tmp_path, device):
    m = UNet()
    x = torch.randn(1, 3, 32, 32)
    p = export(m, (x,), tmp_path / "unet.onnx", ["x"])
    model, _ = check(p, {"x": x.numpy()}, device=device)
    assert {"ConvTranspose", "Resize", "Concat"} <= set(go.onnx_summary(model)["ops"])


def test_dynamic_batch_needs_input_shapes(tmp_path):
    m = nn.Sequential(nn.Linear(6, 3))
    x = torch.randn(2, 6)
    p = export(m, (x,), tmp_path / "dyn.onnx", ["x"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    with pytest.raises(go.OnnxError, match=r"Input 'x' has dynamic shape \[\?x6\]"):
        go.onnx_load(p, device="cpu")
    model, _ = check(p, {"x": x.numpy()}, input_shapes={"x": (2, 6)})
    assert go.onnx_inputs(model) == {"x": [2, 6]}
    # another batch size builds and keeps a second graph
    x5 = torch.randn(5, 6).numpy()
    y5 = go.onnx_run(model, {"x": x5})["y"]
    np.testing.assert_allclose(y5, reference(p, {"x": x5})["y"], rtol=RTOL, atol=ATOL)
    assert len(model._plans) == 2


def test_f16_weights(tmp_path):
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    x = torch.randn(4, 64)
    p = export(m, (x,), tmp_path / "mlp16.onnx", ["x"])
    # half-precision weights: products accumulate in f32, weights carry 2**-11 relative rounding
    check(p, {"x": x.numpy()}, rtol=1e-2, atol=2e-3, dtype="f16")


class Tagger(nn.Module):
    """A bidirectional two-layer LSTM over embeddings, then a linear layer per step."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, bidirectional=True)
        self.out = nn.Linear(48, 5)

    def forward(self, ids):
        y, _ = self.lstm(self.emb(ids))
        return self.out(y)


def test_lstm(tmp_path, device):
    m = Tagger()
    ids = torch.randint(0, 40, (12, 3))  # (seq, batch)
    p = export(m, (ids,), tmp_path / "lstm.onnx", ["ids"])
    model, _ = check(p, {"ids": ids.numpy()}, device=device)
    assert "LSTM" in go.onnx_summary(model)["ops"]


def test_gru(tmp_path):
    m = nn.GRU(10, 16, batch_first=True)
    x = torch.randn(2, 7, 10)
    p = export(m, (x,), tmp_path / "gru.onnx", ["x"], output_names=("y", "h"))
    model, _ = check(p, {"x": x.numpy()})
    assert "GRU" in go.onnx_summary(model)["ops"]


class _Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16 * 8 * 8, 10) * 0.05)

    def forward(self, x):
        return torch.matmul(x, self.w)  # a MatMul (a Linear would become com.microsoft's QGemm)


def test_statically_quantized_cnn(tmp_path):
    """onnxruntime's static quantizer (QOperator format): QuantizeLinear, QLinearConv, MaxPool on
    uint8 values, QLinearMatMul, its contrib QGemm (com.microsoft), DequantizeLinear. Outputs agree to
    within one output quantum."""
    quant = pytest.importorskip("onnxruntime.quantization")
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                      nn.ReLU(), nn.Flatten(), _Head(), nn.ReLU(), nn.Linear(10, 6))
    x = torch.randn(2, 3, 16, 16)
    fp = export(m, (x,), tmp_path / "cnn.onnx", ["x"])
    rng = np.random.default_rng(0)

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)} for _ in range(8)])

        def get_next(self):
            return next(self.it, None)
    qp = str(tmp_path / "qcnn.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quant.quantize_static(fp, qp, Reader(), quant_format=quant.QuantFormat.QOperator,
                              activation_type=quant.QuantType.QUInt8, weight_type=quant.QuantType.QInt8)
    import onnx
    q = onnx.load(qp)
    ops = {n.op_type for n in q.graph.node}
    assert {"QLinearConv", "QLinearMatMul", "QGemm", "QuantizeLinear", "DequantizeLinear"} <= ops
    y_scale = float(next(onnx.numpy_helper.to_array(i) for i in q.graph.initializer if i.name == "y_scale"))
    feeds = {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    got = go.onnx_run(go.onnx_load(qp, device="cpu"), feeds)["y"]
    want = reference(qp, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1.01 * y_scale)
    assert (got == want).mean() >= 0.9
