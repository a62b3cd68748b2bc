"""Small versions of ONNX Model Zoo architectures (ggmlR's inst/examples/test_all_onnx.R runs the
Zoo's files), built with random weights and exported by torch: the real-model set of
tests/test_onnx_zoo.py and of `scripts/bench_onnx.py --zoo`.

Each entry is a function of (torch, tmp folder) giving (path, feeds) or raising Unavailable with
the reason (a model library not installed). Architectures from Hugging Face's transformers and
torchvision are built from their own classes with tiny configurations, in the export settings of the
Zoo's file (opset, exporter); without those libraries, a plain-torch model of the same shape of
graph stands in where one is given (the Inception v3 stem). The int8 Mask R-CNN is quantized by
onnxruntime's own quantizer. timm's bat_resnext26ts and botnet26t_256 make values of five axes
above size one (ggmlpy/onnx/rank5.py); their stand-ins in plain torch make the same five-axis
patterns.
"""
from __future__ import annotations

import importlib
import os
import warnings

import numpy as np

import zoo_torchvision


class Unavailable(Exception):
    """A model that cannot be built here (the reason: what is missing)."""


def _library(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise Unavailable(f"needs {name} (pip install {name})") from None


_torch_outputs = {}  # path -> {output name: torch's own result}, recorded at export


def torch_outputs(path):
    """torch's outputs of the model exported to `path` (by name; {} where none was recorded)."""
    return _torch_outputs.get(path, {})


def _export(torch, model, args, path, names, opset=17, dynamo=False, outputs=("y",)):
    model.eval()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = model(*args)
        _torch_outputs[path] = {outputs[0]: out.numpy()} if isinstance(out, torch.Tensor) else \
            {k: o.numpy() for k, o in zip(outputs, out)}
        torch.onnx.export(model, args, path, dynamo=dynamo, opset_version=opset, input_names=list(names),
                          output_names=list(outputs), verbose=False)
    return path


def inception_stem(torch, tmp, width=1.0, size=299):
    """Inception v3's stem (torchvision's Conv2d_1a_3x3 .. MaxPool of Inception3: 3x3 stride-2
    convolution of a 299x299 image, BatchNorm eps 0.001, ReLU, two max poolings) and a pooled linear
    head, in plain torch; `width` scales its channels (32, 32, 64, 80, 192)."""
    nn = torch.nn

    def conv(cin, cout, k, stride=1, pad=0):
        bn = nn.BatchNorm2d(cout, eps=0.001)
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=False), bn, nn.ReLU())
    c = [max(8, int(round(n * width))) for n in (32, 32, 64, 80, 192)]
    net = nn.Sequential(conv(3, c[0], 3, 2), conv(c[0], c[1], 3), conv(c[1], c[2], 3, pad=1), nn.MaxPool2d(3, 2),
                        conv(c[2], c[3], 1), conv(c[3], c[4], 3), nn.MaxPool2d(3, 2), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(c[4], 10))
    x = torch.randn(1, 3, size, size)
    return _export(torch, net, (x,), os.path.join(tmp, "inception_stem.onnx"), ["image"]), {"image": x.numpy()}


def _torchvision(torch):
    tv = zoo_torchvision.torchvision(torch)
    if tv is None:
        raise Unavailable(f"needs torchvision (a CPU build matching torch, or PyPI's in the folder named by "
                          f"{zoo_torchvision.ENV}: see tests/zoo_torchvision.py)")
    return tv


def _calibrate_batch_norms(torch, net, x):
    """Running statistics from one batch, as training would set them: with random weights and unit
    statistics Inception's activations grow to 1e11 and its logits are differences of such numbers,
    a comparison of rounding, not of the graph."""
    for m in net.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None
    net.train()
    with torch.no_grad():
        net(x)
    net.eval()


def inception_v3(torch, tmp):
    """torchvision's Inception v3 (random weights, no auxiliary head) at 299x299, opset 12 as the Zoo's."""
    tv = _torchvision(torch)
    net = tv.models.inception_v3(weights=None, aux_logits=False, init_weights=True)
    x = torch.randn(1, 3, 299, 299)
    _calibrate_batch_norms(torch, net, torch.randn(4, 3, 299, 299))
    return _export(torch, net, (x,), os.path.join(tmp, "inception_v3.onnx"), ["image"], opset=12), {"image": x.numpy()}


def _first_output(torch, net):
    """The model's first output alone (a transformers model returns a tuple or a ModelOutput)."""
    class First(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, *args):
            return self.net(*args)[0]
    return First()


def _ids(torch, vocab, seq):
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, vocab, (1, seq), generator=g)


def bert(torch, tmp, seq=128):
    """A tiny BertModel (2 layers, hidden 64), opset 17 by the TorchScript exporter: token_type_ids
    come from the model's [1, 512] buffer, which the export gathers."""
    tr = _library("transformers")
    cfg = tr.BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=512)
    net = _first_output(torch, tr.BertModel(cfg, add_pooling_layer=False))
    ids = _ids(torch, 200, seq)
    mask = torch.ones_like(ids)
    path = _export(torch, net, (ids, mask), os.path.join(tmp, "bert.onnx"), ["input_ids", "attention_mask"],
                   outputs=("y",))
    return path, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


def roberta(torch, tmp, seq=64):
    """A tiny RobertaForSequenceClassification (2 layers, hidden 64), opset 9 as the Zoo's file. Opset 9
    has no CumSum nor attention op, so the wrapper gives the position ids (RoBERTa's, after the
    padding index) and an all-ones mask, and attention is the eager one: the graph then has the
    NonZero, OneHot and Where of an opset-9 export."""
    tr = _library("transformers")
    cfg = tr.RobertaConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, max_position_embeddings=seq + 4, num_labels=2,
                           attn_implementation="eager")
    net = tr.RobertaForSequenceClassification(cfg)

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0) + cfg.pad_token_id + 1
            return self.net(ids, attention_mask=torch.ones_like(ids), position_ids=pos)[0]
    ids = _ids(torch, 200, seq)
    return _export(torch, Classifier(), (ids,), os.path.join(tmp, "roberta.onnx"), ["input_ids"], opset=9), \
        {"input_ids": ids.numpy()}


def gpt_neox(torch, tmp, seq=32):
    """A tiny GPTNeoXModel (2 layers, hidden 64) by torch's dynamo exporter (opset 18), with a padding
    mask, which transformers' export writes with GatherND."""
    tr = _library("transformers")
    _library("onnxscript")
    cfg = tr.GPTNeoXConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=128, max_position_embeddings=128, use_cache=False)
    net = _first_output(torch, tr.GPTNeoXModel(cfg))
    ids = _ids(torch, 200, seq)
    mask = torch.ones_like(ids)
    mask[0, : seq // 4] = 0  # left padding
    path = _export(torch, net, (ids, mask), os.path.join(tmp, "gpt_neox.onnx"), ["input_ids", "attention_mask"],
                   opset=18, dynamo=True)
    return path, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}


def _timm(name, torch, tmp):
    """timm's model `name` (random weights) at 256x256, opset 17."""
    try:
        timm = importlib.import_module("timm")
    except ImportError as e:  # timm imports torchvision too
        raise Unavailable(f"needs timm and torchvision (pip install timm): {e}") from None
    net = timm.create_model(name, pretrained=False)
    x = torch.randn(1, 3, 256, 256)
    return _export(torch, net, (x,), os.path.join(tmp, f"{name}.onnx"), ["image"]), {"image": x.numpy()}


def botnet26t(torch, tmp):
    """timm's botnet26t_256: relative-position logits expanded to [B*heads, H, W, W, W] and permuted."""
    return _timm("botnet26t_256", torch, tmp)


def bat_resnext26ts(torch, tmp):
    """timm's bat_resnext26ts: bilinear attention blocks reshaped to [B*C, 8, 8, 8, 8] and re-tiled."""
    return _timm("bat_resnext26ts", torch, tmp)


def relpos_attention(torch, tmp, size=8, dim=16, heads=2):
    """botnet26t's five-axis pattern in plain torch: a self-attention over an 8x8 map whose
    relative-position logits (timm's PosEmbedRel, rel_logits_1d) are reshaped to [B*heads, H, 1, W,
    W], expanded over the window, permuted (0, 1, 3, 2, 4) and (0, 3, 1, 4, 2), and added."""
    nn, F = torch.nn, torch.nn.functional
    dh = dim // heads

    def rel_logits_1d(q, rel_k, perm):
        B, H, W, _ = q.shape
        rel = rel_k.shape[0]
        win = (rel + 1) // 2
        x = (q @ rel_k.transpose(-1, -2)).reshape(-1, W, rel)
        x = F.pad(F.pad(x, [0, 1]).flatten(1), [0, rel - W]).reshape(-1, W + 1, rel)[:, :W, win - 1:]
        return x.reshape(B, H, 1, W, win).expand(-1, -1, win, -1, -1).permute(perm)

    class RelPosAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, dim, 3, padding=1)
            self.qkv = nn.Conv2d(dim, 3 * dim, 1, bias=False)
            self.rel_h = nn.Parameter(torch.randn(2 * size - 1, dh) * dh ** -0.5)
            self.rel_w = nn.Parameter(torch.randn(2 * size - 1, dh) * dh ** -0.5)
            self.head = nn.Linear(dim, 10)

        def forward(self, img):
            x = self.stem(img)
            B, C, H, W = x.shape
            q, k, v = self.qkv(x).split(C, dim=1)
            q = q.reshape(B * heads, dh, -1).transpose(-1, -2)
            k = k.reshape(B * heads, dh, -1)
            v = v.reshape(B * heads, dh, -1).transpose(-1, -2)
            qr = q.reshape(-1, H, W, dh)
            rw = rel_logits_1d(qr, self.rel_w, (0, 1, 3, 2, 4)).reshape(-1, H * W, H * W)
            rh = rel_logits_1d(qr.transpose(1, 2), self.rel_h, (0, 3, 1, 4, 2)).reshape(-1, H * W, H * W)
            attn = ((q @ k) * dh ** -0.5 + rh + rw).softmax(-1)
            out = (attn @ v).transpose(-1, -2).reshape(B, C, H, W)
            return self.head(out.mean((2, 3)))
    x = torch.randn(2, 3, size, size)
    return _export(torch, RelPosAttention(), (x,), os.path.join(tmp, "relpos_attention.onnx"), ["image"]), \
        {"image": x.numpy()}


def bilinear_resize(torch, tmp, block=4, t=3, ch=4):
    """bat_resnext26ts's five-axis pattern in plain torch (timm's BilinearAttnTransform.resize_mat):
    [B, C, block, block] matrices times an identity, reshaped to [B*C, block, block, t, t], split
    along axes 1 and 2 and concatenated along 3 and 4, which tiles each entry over a t x t block."""
    nn = torch.nn

    class BilinearResize(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, ch, 3, padding=1)
            self.pool = nn.AdaptiveAvgPool2d(block)

        def forward(self, img):
            x = self.stem(img)
            B, C = x.shape[:2]
            m = self.pool(x).sigmoid().reshape(B * C, -1, 1, 1) * torch.eye(t, t)
            m = m.reshape(B * C, block, block, t, t)
            m = torch.cat(torch.split(m, 1, dim=1), dim=3)
            m = torch.cat(torch.split(m, 1, dim=2), dim=4)
            m = m.reshape(B, C, block * t, block * t)
            return m @ x
    x = torch.randn(2, 3, block * t, block * t)
    return _export(torch, BilinearResize(), (x,), os.path.join(tmp, "bilinear_resize.onnx"), ["image"]), \
        {"image": x.numpy()}


def mask_rcnn_int8(torch, tmp, size=224):
    """torchvision's Mask R-CNN (a ResNet-18 FPN backbone, 5 classes) on a size x size image, opset 12,
    quantized by onnxruntime's quantize_static on every op it quantizes (QOperator, uint8: QLinearConv,
    QGemm, QLinearAdd, QLinearMul, QLinearConcat, QLinearSigmoid, QLinearSoftmax), as the Zoo's
    MaskRCNN-12-int8. Its outputs are the Zoo file's: boxes, labels, scores and 28x28 mask
    probabilities (masks not pasted into the image). At 224x224 some FPN levels get no region, so a
    stage is fed an empty value. The backbone's batch norms take running statistics from one batch;
    two random images calibrate the quantization."""
    tv = _torchvision(torch)
    ortq = importlib.import_module("onnxruntime.quantization")
    from torchvision.models.detection import MaskRCNN
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
    backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5,
                                   norm_layer=torch.nn.BatchNorm2d)
    _calibrate_batch_norms(torch, backbone, (torch.rand(4, 3, size, size) - 0.45) / 0.225)
    net = MaskRCNN(backbone, num_classes=5, min_size=size, max_size=size).eval()
    assert tv is not None

    class Detections(torch.nn.Module):
        """One image in, the first image's detections out, masks as the mask head gives them."""
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, image):
            n = self.net
            images, _ = n.transform([image])
            features = n.backbone(images.tensors)
            proposals, _ = n.rpn(images, features)
            d = n.roi_heads(features, proposals, images.image_sizes)[0][0]
            return d["boxes"], d["labels"], d["scores"], d["masks"]
    x = torch.rand(3, size, size)
    outputs = ("boxes", "labels", "scores", "masks")
    fp32 = _export(torch, Detections(), (x,), os.path.join(tmp, "mask_rcnn.onnx"), ["image"], opset=12,
                   outputs=outputs)
    _torch_outputs.pop(fp32, None)  # the int8 model's results are not torch's
    pre = os.path.join(tmp, "mask_rcnn_pre.onnx")
    ortq.shape_inference.quant_pre_process(fp32, pre, skip_symbolic_shape=True)
    rng = np.random.default_rng(0)

    class Images(ortq.CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"image": rng.random((3, size, size), dtype=np.float32)} for _ in range(2)])

        def get_next(self):
            return next(self.it, None)
    path = os.path.join(tmp, "mask_rcnn_int8.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ortq.quantize_static(pre, path, Images(), quant_format=ortq.QuantFormat.QOperator,
                             activation_type=ortq.QuantType.QUInt8, weight_type=ortq.QuantType.QUInt8)
    _add_mask_logits(path)
    return path, {"image": np.random.default_rng(5).random((3, size, size), dtype=np.float32)}


def _add_mask_logits(path):
    """Make the mask head's dequantized logits (the input of its QLinearSigmoid, every class) an output,
    'mask_logits' [N, classes, 28, 28], so that a mask probability can be traced to its logit."""
    onnx = importlib.import_module("onnx")
    model = onnx.load(path)
    sigmoid = [n for n in model.graph.node if n.op_type == "QLinearSigmoid"][-1]
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == sigmoid.input[0])
    model.graph.node.append(onnx.helper.make_node("Identity", [dq.output[0]], ["mask_logits"]))
    model.graph.output.append(onnx.helper.make_tensor_value_info("mask_logits", onnx.TensorProto.FLOAT,
                                                                  ["detections", "classes", "height", "width"]))
    onnx.save(model, path)


QUANTIZED = "int8"  # a ZOO entry's comparison for quantized models: see tests/test_onnx_zoo.py

# name -> (builder, what the test compares: rtol, atol, or QUANTIZED)
ZOO = {
    "inception_stem": (inception_stem, (1e-4, 1e-4)),
    "inception_v3": (inception_v3, (1e-3, 1e-4)),
    "bert": (bert, (1e-3, 1e-4)),
    "roberta": (roberta, (1e-3, 1e-4)),
    "gpt_neox": (gpt_neox, (1e-3, 1e-4)),
    "botnet26t_256": (botnet26t, (1e-3, 1e-4)),
    "bat_resnext26ts": (bat_resnext26ts, (1e-3, 1e-7)),  # logits about 1e-3 (timm zero-initializes last norms)
    "relpos_attention": (relpos_attention, (1e-4, 1e-5)),
    "bilinear_resize": (bilinear_resize, (1e-4, 1e-5)),
    "mask_rcnn_int8": (mask_rcnn_int8, QUANTIZED),
}


def build(name, torch, tmp):
    """(path, feeds) of a zoo model; Unavailable with the reason where it cannot be built here."""
    torch.manual_seed(0)
    np.random.seed(0)
    return ZOO[name][0](torch, tmp)
