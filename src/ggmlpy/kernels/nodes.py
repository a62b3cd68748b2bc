"""The kernels' node builders: `Kernels` (the loaded libraries, and a method per kernel that makes its
ggml custom-op node in a graph under construction), and the front ends' shared nodes that use a
kernel where there is one (relu, keep_nan, extremum). loader.py compiles and loads the libraries,
rewrite.py turns nodes ggml made into these kernels' nodes."""
from __future__ import annotations

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from ..bindings import ffi, lib

N_TASKS_MAX = -1  # ggml's GGML_N_TASKS_MAX: as many tasks as the backend has threads
LNR_PACKED = 12  # conv2d_packed's pixels a block (conv.c's LNR)
LANE_CHANNELS, LANE_PIXELS = 64, 7  # conv2d_pixels' block 4: channels a panel, pixels a tile (conv.c's RC, RP)
LANE_STORE_TAPS = 16  # what a lane tile's transposed store into NCHW costs, in taps of its product
LANE_IN_PLACE = 1.15  # the lane kernel's speed-up where it reads an unpadded input without a copy
DIRECT_MAX_FLOATS = 4 << 20  # conv.c's: the largest padded input its pixel kernel copies (direct_planes)


def direct_fits(planes_hw: tuple | None, planes: int) -> bool:
    """Whether conv.c's kernels without patches copy direct_planes' (planes_hw, planes) (within their budget)."""
    return planes_hw is not None and planes * planes_hw[0] * planes_hw[1] + 64 <= DIRECT_MAX_FLOATS


def direct_planes(out_hw: tuple, kernel: tuple, stride: tuple, dilation: tuple, in_channels: int):
    """((Hs, Ws), count): the phase planes conv.c's pixel kernel copies the zero-padded input into to
    read it without patches (s x s of Hs x Ws a channel for equal strides s), or (None, 0) where the
    strides differ."""
    if stride[0] != stride[1]:
        return None, 0
    s = stride[0]
    hp, wp = ((o - 1) * s + d * (k - 1) + 1 for o, k, d in zip(out_hw, kernel, dilation))
    return (-(-hp // s), -(-wp // s)), in_channels * s * s


class Kernels:
    """The loaded library: builders of the custom-op nodes."""

    def __init__(self, kernels_lib, path: Path, gemm_lib=None, conv_lib=None, rows_lib=None, rnn_lib=None,
                 attention_lib=None, conv_transpose_lib=None):
        # one library per source (kernels.c, gemm.c, conv.c, rows.c, rnn.c, attention.c), kept alive:
        # graphs hold their pointers
        self.kernels_lib, self.gemm_lib, self.conv_lib = kernels_lib, gemm_lib, conv_lib
        self.rows_lib, self.rnn_lib, self.attention_lib = rows_lib, rnn_lib, attention_lib
        self.conv_transpose_lib = conv_transpose_lib
        self.path = path
        self._gelu = kernels_lib.ggmlpy_gelu_erf_f32
        self._relu = kernels_lib.ggmlpy_relu_f32
        self._gelu_back = kernels_lib.ggmlpy_gelu_back_f32
        self._gelu_deriv = kernels_lib.ggmlpy_gelu_deriv_f32
        self._keep_nan = kernels_lib.ggmlpy_keep_nan_f32
        self._sum_rows = kernels_lib.ggmlpy_sum_rows_f32
        self._extremum = kernels_lib.ggmlpy_extremum_f32
        self._qlinear_add = kernels_lib.ggmlpy_qlinear_add_f32
        self._layer_norm_back = kernels_lib.ggmlpy_layer_norm_back_f32
        self._cross_entropy_fn = kernels_lib.ggmlpy_cross_entropy_f32
        self._gemm_fn = gemm_lib.ggmlpy_gemm_f32 if gemm_lib is not None else None
        self.gemm = self._gemm if gemm_lib is not None else None  # None: products stay ggml's
        self._conv_fn = conv_lib.ggmlpy_conv2d_f32 if conv_lib is not None else None
        self._pool_fn = conv_lib.ggmlpy_maxpool2d_f32 if conv_lib is not None else None
        self._linear_fn = conv_lib.ggmlpy_linear_f32 if conv_lib is not None else None
        self.linear = self._linear if conv_lib is not None else None  # None: a product, then ggml's add
        # the packed products (linear layers, conv2d_packed) and the pixel-major convolutions (conv2d_pixels,
        # conv2d_pool) have AVX2 and AVX-512 paths
        self.packed_rows = int(conv_lib.ggmlpy_linear_packed_mr()) if conv_lib is not None else 0  # 0: no AVX2 or AVX-512
        self._packed_fn = conv_lib.ggmlpy_linear_packed_f32 if self.packed_rows else None
        self.linear_packed = self._linear_packed if self.packed_rows else None  # None: linear, over OpenBLAS
        self._conv_packed_fn = conv_lib.ggmlpy_conv2d_packed_f32 if self.packed_rows else None
        self.conv2d_packed = self._conv2d_packed if self.packed_rows else None  # None: conv2d, over OpenBLAS
        pixels = conv_lib is not None and int(conv_lib.ggmlpy_conv_pixels_rows(1)) > 0
        # the floats of conv.c's vectors: 16 (AVX-512), 8 (AVX2), 0; the kernels' speeds differ between them
        self.vector_floats = int(conv_lib.ggmlpy_conv_vector_floats()) if conv_lib is not None else 0
        self._conv_pixels_fn = conv_lib.ggmlpy_conv2d_pixels_f32 if pixels else None
        self.conv2d_pixels = self._conv2d_pixels if pixels else None  # None: no AVX2 or AVX-512
        self.conv2d_pool = self._conv2d_pool if pixels else None  # None: the convolution, then maxpool2d
        self.conv2d = self._conv2d if conv_lib is not None else None  # None: ggml's im2col and products
        self.maxpool2d = self._maxpool2d if conv_lib is not None else None  # None: ggml's pool_2d
        self._im2col_back_fn = conv_lib.ggmlpy_im2col_back_f32 if conv_lib is not None else None
        self._params: dict = {}  # parameter tuple -> int32 array (userdata: lives as long as this)
        self._ln_fn = rows_lib.ggmlpy_layernorm_f32 if rows_lib is not None else None
        self.layernorm = self._layernorm if rows_lib is not None else None  # None: ggml's norm, mul and add
        self._topk_fn = rows_lib.ggmlpy_topk_f32 if rows_lib is not None else None
        self.topk = self._topk if rows_lib is not None else None  # None: ggml's argsort (ties in any order)
        self._lstm_fn = rnn_lib.ggmlpy_lstm_f32 if rnn_lib is not None else None
        self.lstm = self._lstm if rnn_lib is not None else None  # None: the cell unrolled into ggml's ops
        self._attention_fn = attention_lib.ggmlpy_attention_f32 if attention_lib is not None else None
        self.attention = self._attention if attention_lib is not None else None  # None: products and ggml's softmax
        self._convt_fn = conv_transpose_lib.ggmlpy_conv_transpose_f32 if conv_transpose_lib is not None else None
        # None: a convolution of the zero-dilated input
        self.conv_transpose = self._conv_transpose if conv_transpose_lib is not None else None

    def gelu(self, ctx, x):
        """x Phi(x) (exact GELU) of an f32 tensor, as one custom-op node."""
        return lib.ggml_map_custom1(ctx, _contiguous(ctx, x), self._gelu, N_TASKS_MAX, ffi.NULL)

    def relu(self, ctx, x):
        """max(x, 0) of an f32 tensor keeping NaN, relu(-inf) = 0, as one custom-op node (see relu())."""
        return lib.ggml_map_custom1(ctx, _contiguous(ctx, x), self._relu, N_TASKS_MAX, ffi.NULL)

    def gelu_back(self, ctx, g, x):
        """g (Phi(x) + x phi(x)), GELU's input gradient, as one custom-op node."""
        return lib.ggml_map_custom2(ctx, _contiguous(ctx, g), _contiguous(ctx, x), self._gelu_back,
                                    N_TASKS_MAX, ffi.NULL)

    def gelu_deriv(self, ctx, x):
        """gelu'(x) = Phi(x) + x phi(x), as one custom-op node."""
        return lib.ggml_map_custom1(ctx, _contiguous(ctx, x), self._gelu_deriv, N_TASKS_MAX, ffi.NULL)

    def gelu_deriv2(self, ctx, x):
        """gelu''(x) = phi(x) (2 - x^2), as one custom-op node."""
        return lib.ggml_map_custom1(ctx, _contiguous(ctx, x), self._gelu_deriv, N_TASKS_MAX, ffi.cast("void *", 1))

    def sum_rows(self, ctx, x):
        """Each row's sum (ggml_sum_rows' values, [1, ne1, ne2, ne3]) with the rows shared among
        the threads, as one node."""
        x = _contiguous(ctx, x)
        args = ffi.new("struct ggml_tensor *[1]", [x])
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, 1, x.ne[1], x.ne[2], x.ne[3], args, 1, self._sum_rows,
                                  N_TASKS_MAX, ffi.NULL)

    def keep_nan(self, ctx, fx, x):
        """fx (f(x), x's shape) with x's NaN put back, as one custom-op node."""
        return lib.ggml_map_custom2(ctx, _contiguous(ctx, fx), _contiguous(ctx, x), self._keep_nan, N_TASKS_MAX,
                                    ffi.NULL)

    def extremum(self, ctx, a, b, larger: bool):
        """max(a, b) or min(a, b) of tensors of one shape, NaN where either is, as one node."""
        return lib.ggml_map_custom2(ctx, _contiguous(ctx, a), _contiguous(ctx, b), self._extremum, N_TASKS_MAX,
                                    ffi.NULL if larger else ffi.cast("void *", 1))

    def qlinear_add(self, ctx, a, b, za: int, zb: int, zc: int, r_ac: float, r_bc: float, lo: int, hi: int):
        """onnxruntime's QLinearAdd of integer-valued f32 tensors (b broadcast to a's shape):
        round(fma(a - za, r_ac, (b - zb) r_bc)) + zc saturated to [lo, hi], as one node."""
        if any(a.ne[i] != b.ne[i] for i in range(4)):
            b = lib.ggml_repeat(ctx, b, a)
        params = self._userdata((int(za), int(zb), int(zc), _float_bits(r_ac, signed=True),
                                 _float_bits(r_bc, signed=True), int(lo), int(hi)), "qadd")
        return lib.ggml_map_custom2(ctx, _contiguous(ctx, a), _contiguous(ctx, b), self._qlinear_add, N_TASKS_MAX,
                                    params)

    def layer_norm_back(self, ctx, g, x, eps: float):
        """Layer norm's input gradient per column (ggml_norm's normalisation), as one node."""
        return lib.ggml_map_custom2(ctx, _contiguous(ctx, g), _contiguous(ctx, x), self._layer_norm_back,
                                    N_TASKS_MAX, ffi.cast("void *", _float_bits(eps)))  # the float as userdata's bits

    def _gemm(self, ctx, a, b, ta=False, tb=False):
        """op(a) %*% op(b) of f32 tensors in R's column-major reading (ne0 rows), batched over
        ne2/ne3 with a batch of 1 (or a divisor) broadcasting, as one node: no transposed
        copies. Operands whose rows are not contiguous are copied first."""
        a, b = _rows_contiguous(ctx, a), _rows_contiguous(ctx, b)
        if not gemm_fits(a, b):
            raise ValueError("gemm: a dimension past BLAS's int range (check gemm_fits first)")
        return self._gemm_node(ctx, a, b, ta, tb)

    def _gemm_node(self, ctx, a, b, ta, tb):
        """The gemm node itself, of operands BLAS can read as they are (_gemm_operand)."""
        m, n = (a.ne[1] if ta else a.ne[0]), (b.ne[0] if tb else b.ne[1])
        args = ffi.new("struct ggml_tensor *[2]", [a, b])
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, m, n, max(a.ne[2], b.ne[2]), max(a.ne[3], b.ne[3]),
                                  args, 2, self._gemm_fn, N_TASKS_MAX, ffi.cast("void *", int(ta) | int(tb) << 1))

    def _conv2d(self, ctx, x, w, kernel, stride, pad, dilation, out_hw, groups=1, bias=None, residual=None,
                relu=False, block=0):
        """NCHW convolution as one node: x ne [W, H, C, N] and w [C/groups*KH*KW, M] (ONNX's weights),
        contiguous f32; pad = (top, left) (the bottom and right pads are implied by out_hw = (OH, OW));
        then + bias [M], + residual (the output's shape), ReLU. Returns ne [OW, OH, M, N].
        The caller validates the geometry (see conv.c for the layout)."""
        return self._conv_node(ctx, self._conv_fn, x, w, int(w.ne[1]), kernel, stride, pad, dilation, out_hw, groups,
                               bias, residual, relu, block)

    def pack_conv(self, w: np.ndarray, groups: int = 1) -> np.ndarray:
        """ONNX conv weights (M, C/groups, KH, KW) in the panels conv2d_packed reads: each group's
        (M/groups, C/groups*KH*KW) matrix transposed through pack_linear, the groups one after another."""
        M = w.shape[0]
        mats = w.reshape(groups, M // groups, -1)
        return np.concatenate([self.pack_linear(np.ascontiguousarray(m.T)) for m in mats])

    def _conv2d_packed(self, ctx, x, wp, out_channels, kernel, stride, pad, dilation, out_hw, groups=1, bias=None,
                       residual=None, relu=False):
        """conv2d with the weights as pack_conv(W, groups) (ne [rows, C/groups*KH*KW, panels]): conv.c's
        AVX2 or AVX-512 product. Same arguments and result otherwise."""
        return self._conv_node(ctx, self._conv_packed_fn, x, wp, out_channels, kernel, stride, pad, dilation, out_hw,
                               groups, bias, residual, relu, 0)

    def packed_conv_kind(self, out_hw: tuple, channels: int, planes_hw: tuple | None = None,
                         planes: int = 0, stride: int = 1, taps: int = 0, unpadded: bool = False) -> str | None:
        """Which of conv.c's convolutions with weights packed at load suits a layer of output planes
        out_hw = (OH, OW), `channels` output channels a group and `taps` = C/groups*KH*KW products a
        value: "pixels" (conv2d_pixels, blocks of 48 pixels by 8 channels, stored as whole vectors into
        NCHW), "channels" (conv2d_packed, 32 channels by 12 pixels, a plane's last strip computing only
        its pixels), "lanes" (conv2d_pixels' block 4: 64 channels by 7 pixels of a row, from the padded
        input, transposed into NCHW), whichever computes fewer padding lanes, weighted by their speed
        per useful lane as measured on ResNet-18's layers (a 32 KB-L1 AVX-512 core, batches 1 and 8):
        pixels 1.1 with patches, and where the layer's strides are equal and the pixel kernel reads the
        padded input's `planes` phase planes of planes_hw = (Hs, Ws) without patches (direct_planes;
        its Ws - OW extra pixels a row count as padding, except where OW is a multiple of 16 and the
        blocks are whole rows' vectors) 1.25 at `stride` 1 and 1.1 at larger strides (their s x s
        phase planes a channel are read from further away); lanes (the same planes) 1.3 at stride 1
        and 1.2 at larger strides (a tile's broadcasts then span more cache lines), less a tile's
        transposed store, worth LANE_STORE_TAPS taps (measured: it loses on ResNet's stem, 147 taps at
        stride 2, and on the 1x1 downsampling of 64 channels, ties or wins on that of 128 and 256 and
        wins on every 3x3 layer from 56 x 56 on; without `taps` it is not chosen), and LANE_IN_PLACE
        times that for an `unpadded` layer, whose input it reads in place rather than copying (measured
        on the 1x1 downsampling of 64 channels, where it then wins). In the AVX2 build (vector_floats
        8; measured on its layers on an AVX-512 core, batch 1) the pixel kernel is 1.2 at stride 1 and
        1.1 at larger strides, and the lanes kernel no faster per useful lane than the channel one (1.0,
        so never chosen where that one's panels are full): ResNet-18's planes from 56 x 56 to 28 x 28
        take the pixel kernel, 14 x 14 and 7 x 7 the channel one. "channels" where conv.c has no
        pixel-major kernels; None without AVX2 or AVX-512 or below 8 channels (depthwise), where
        OpenBLAS's conv2d runs it."""
        oh, ow = out_hw
        pixels = oh * ow
        if not self.packed_rows or channels < 8 or pixels < 1:
            return None
        if self.conv2d_pixels is None:
            return "channels"

        def used(n, block, real=None):  # the share of a block's lanes that hold real values
            return (n if real is None else real) / (-(-n // block) * block)
        by_lanes = 0.0
        avx2 = self.vector_floats == 8
        if direct_fits(planes_hw, planes):
            speed = (1.2 if avx2 else 1.25) if stride == 1 else 1.1
            virtual = pixels if ow % 16 == 0 else (oh - 1) * planes_hw[1] + ow
            by_pixels = speed * used(virtual, 48, pixels) * used(channels, 8)
            lane_speed = 1.0 if avx2 else (1.3 if stride == 1 else 1.2) * (LANE_IN_PLACE if unpadded else 1.0)
            by_lanes = (lane_speed * taps / (taps + LANE_STORE_TAPS) * used(channels, LANE_CHANNELS)
                        * used(ow, LANE_PIXELS))
        else:
            by_pixels = 1.1 * used(pixels, 48) * used(channels, 8)
        by_channels = used(channels, self.packed_rows)
        best = max(by_pixels, by_channels)
        return "lanes" if by_lanes > best else "pixels" if by_pixels >= by_channels else "channels"

    def pack_conv_pixels(self, w: np.ndarray, groups: int, vectors: int) -> np.ndarray:
        """ONNX conv weights (M, C/groups, KH, KW) in the panels conv2d_pixels reads with `vectors`
        (1, 2 or 3) vectors of pixels, or with 4 (channels in the lanes, "lanes"): (groups * panels,
        C/groups*KH*KW, rows) with rows = 24 / vectors output channels a panel (64 for 4),
        out[g * panels + p, k, r] = W[g * M/groups + p * rows + r, k], zero past each group's channels."""
        rows = int(self.conv_lib.ggmlpy_conv_pixels_rows(vectors))
        if rows == 0:
            raise ValueError(f"pack_conv_pixels: vectors must be 1, 2, 3 or 4, got {vectors}")
        M = w.shape[0]
        Mg = M // groups
        npan = -(-Mg // rows)
        mats = np.zeros((groups, npan * rows, w[0].size), np.float32)
        mats[:, :Mg] = w.reshape(groups, Mg, -1)
        return np.ascontiguousarray(mats.reshape(groups, npan, rows, -1).transpose(0, 1, 3, 2).reshape(groups * npan, -1, rows))

    def _conv2d_pixels(self, ctx, x, wp, out_channels, kernel, stride, pad, dilation, out_hw, groups=1, bias=None,
                       residual=None, relu=False, vectors=2):
        """conv2d with the weights as pack_conv_pixels(W, groups, vectors) (ne [rows, C/groups*KH*KW,
        groups * panels]): conv.c's product with `vectors` 16-pixel segments in a block. Same
        arguments and result otherwise."""
        return self._conv_node(ctx, self._conv_pixels_fn, x, wp, out_channels, kernel, stride, pad, dilation, out_hw,
                               groups, bias, residual, relu, vectors)

    def _conv2d_pool(self, ctx, x, wp, out_channels, kernel, stride, pad, dilation, out_hw, groups, bias, relu,
                     pool_kernel, pool_stride, pool_pad, pool_hw, band=0):
        """conv2d_pixels with 3 vectors (wp = pack_conv_pixels(W, groups, 3)) on the padded input's phase
        planes, then maxpool2d of its output (windows pool_kernel at pool_stride from pool_pad = (top,
        left), pool_hw of them), as one node: the convolution's output is pooled a band of rows at a time
        while in cache and never written (band: pooled rows a band, 0: chosen by conv.c to stay in L2);
        the same values, bit for bit, as the two nodes. No residual.
        The caller checks that the kernel applies (direct_fits, equal strides); where it does not, the
        output is NaN. Returns ne [pool OW, pool OH, M, N]."""
        args = [x, wp] + ([bias] if bias is not None else [])
        params = self._userdata((*kernel, *stride, *pad, *dilation, groups, int(relu) | (2 if bias is not None else 0),
                                 5, *out_hw, *pool_kernel, *pool_stride, *pool_pad, band))
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, pool_hw[1], pool_hw[0], out_channels, x.ne[3],
                                  ffi.new("struct ggml_tensor *[]", args), len(args), self._conv_pixels_fn,
                                  N_TASKS_MAX, params)

    def _conv_node(self, ctx, fn, x, w, M, kernel, stride, pad, dilation, out_hw, groups, bias, residual, relu, block):
        args = [x, w] + [t for t in (bias, residual) if t is not None]
        flags = int(relu) | (2 if bias is not None else 0) | (4 if residual is not None else 0)
        params = self._userdata((*kernel, *stride, *pad, *dilation, groups, flags, block))
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, out_hw[1], out_hw[0], M, x.ne[3],
                                  ffi.new("struct ggml_tensor *[]", args), len(args), fn, N_TASKS_MAX, params)

    def _maxpool2d(self, ctx, x, kernel, stride, pad, out_hw):
        """Max pooling of x ne [W, H, C, N] (contiguous f32) as one node: windows `kernel` = (KH, KW) at
        `stride`, starting `pad` = (top, left) cells before the input, out_hw = (OH, OW) of them; cells
        outside the input never win. Returns ne [OW, OH, C, N]. The caller validates the geometry."""
        params = self._userdata((*kernel, *stride, *pad), "pool")
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, out_hw[1], out_hw[0], x.ne[2], x.ne[3],
                                  ffi.new("struct ggml_tensor *[]", [x]), 1, self._pool_fn, N_TASKS_MAX, params)

    def _linear(self, ctx, w, x, bias):
        """w [N, K] x [K, T] + bias [N] (column-major; ONNX's X @ W + b with W in its own layout) as
        one node; all contiguous f32, x's rows possibly split over ne2/ne3. Returns ne [N, T]."""
        args = ffi.new("struct ggml_tensor *[3]", [w, x, bias])
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, w.ne[0], x.ne[1] * x.ne[2] * x.ne[3], 1, 1, args, 3,
                                  self._linear_fn, N_TASKS_MAX, ffi.NULL)

    def pack_linear(self, w_kn: np.ndarray) -> np.ndarray:
        """ONNX weights W (K, N) in the panels linear_packed reads: (panels, K, rows) with
        out[p, k, r] = W[k, p * rows + r], zero past N."""
        K, N = w_kn.shape
        mr = self.packed_rows
        npan = -(-N // mr)
        wp = np.zeros((K, npan * mr), np.float32)
        wp[:, :N] = w_kn
        return np.ascontiguousarray(wp.reshape(K, npan, mr).transpose(1, 0, 2))

    def _linear_packed(self, ctx, wp, x, n_out, bias=None, gelu=False, residual=None, split=0):
        """X @ W (+ bias) as one node of conv.c's AVX2 or AVX-512 product: wp is pack_linear(W) as a ggml
        tensor [rows, K, panels], x [K, T] contiguous (T rows of ONNX's X, possibly over ne2/ne3),
        bias [N] or None; residual: N * T contiguous f32 added to the result (another tensor than
        the result's: the allocator never computes a custom op over its input), or None; gelu:
        exact GELU of that in the same node. Returns ne [N, T]; with split (a multiple of
        packed_rows dividing N) ne [split, T, N / split]: the result's rows in parts of split, each
        part's [split, T] matrix after the other."""
        if split and residual is not None:
            raise ValueError("linear_packed: a residual is read in [N, T] order, not in split parts")
        T = x.ne[1] * x.ne[2] * x.ne[3]
        flags = int(bias is not None) | 2 * bool(gelu) | 4 * (residual is not None) | 8 * bool(split)
        params = self._userdata((flags, int(split)), "linear")
        args = [wp, x] + [t for t in (bias, residual) if t is not None]
        ne = (split, T, n_out // split, 1) if split else (n_out, T, 1, 1)
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, *ne, ffi.new("struct ggml_tensor *[]", args), len(args),
                                  self._packed_fn, N_TASKS_MAX, params)

    def _layernorm(self, ctx, x, gamma=None, beta=None, eps=1e-5):
        """(x - mean) / sqrt(var + eps) * gamma + beta over the rows (ne0) of a contiguous f32 x, as one
        node; gamma and beta: contiguous f32 of ne0 elements, or None."""
        flags = int(gamma is not None) | (2 if beta is not None else 0)
        params = self._userdata((_float_bits(eps, signed=True), flags), "ln")
        args = [x] + [t for t in (gamma, beta) if t is not None]
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, x.ne[0], x.ne[1], x.ne[2], x.ne[3],
                                  ffi.new("struct ggml_tensor *[]", args), len(args), self._ln_fn, N_TASKS_MAX, params)

    def _topk(self, ctx, rows, k: int, largest: bool = True):
        """The indices (I32 ne [k, R]) of each row's k largest (or smallest) values of a contiguous f32
        rows ne [L, R], in ONNX TopK's order: equal values by index, lower first; as one node."""
        params = self._userdata((int(k), int(largest)), "topk")
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_I32, int(k), rows.ne[1], 1, 1,
                                  ffi.new("struct ggml_tensor *[]", [rows]), 1, self._topk_fn, N_TASKS_MAX, params)

    def _conv_transpose(self, ctx, x, w, bias, kernel, stride, dilation, pad, out_hw, groups, kblock):
        """ONNX's 2-D ConvTranspose summed as onnxruntime sums it (conv_transpose.c) as one node: x ne [W, H,
        C, N], w ne [M/groups*KH*KW, C/groups, groups] (ONNX's weights as they are), bias [M] or None, all
        contiguous f32; pad = (top, left), out_hw = (OH, OW), kblock the input channels a block of the
        product's sums (mlas_k_block). Returns ne [OW, OH, M, N]."""
        M = int(w.ne[0]) // (kernel[0] * kernel[1]) * groups
        params = self._userdata((*kernel, *stride, *dilation, *pad, int(groups), int(kblock), int(bias is not None)),
                                "convt")
        args = [x, w] + ([bias] if bias is not None else [])
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, int(out_hw[1]), int(out_hw[0]), M, x.ne[3],
                                  ffi.new("struct ggml_tensor *[]", args), len(args), self._convt_fn, N_TASKS_MAX,
                                  params)

    def _lstm(self, ctx, xw, rt, h0, c0, peepholes=None, reverse=False):
        """One LSTM direction over its sequence as one node (rnn.c; one task): xw ne [4H, N*T] the input
        projections with both biases (column t*N + n), rt ne [4H, H] the recurrent weights R (4H, H)
        transposed, h0 and c0 ne [H, N], peepholes ne [3H] (i, o, f) or None; all contiguous f32.
        Returns ne [H, N, T + 1]: slice t is h_t, slice T the last cell state."""
        G, NT = int(xw.ne[0]), int(xw.ne[1])
        H, N = G // 4, int(h0.ne[1])
        args = [xw, rt, h0, c0] + ([peepholes] if peepholes is not None else [])
        params = self._userdata((int(reverse), int(peepholes is not None)), "lstm")
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, H, N, NT // N + 1, 1, ffi.new("struct ggml_tensor *[]", args),
                                  len(args), self._lstm_fn, 1, params)

    def _attention(self, ctx, q, kt, v, mask=None, scale: float = 1.0, heads_inner: bool = False):
        """softmax(scale q kt + mask) v per batch matrix, as one node (attention.c): q ne [D, L, H, B],
        kt [S, D, H, B], v [E, S, H, B], mask [S | 1, L | 1, H | 1, B | 1] or None, all f32 read through
        their strides (views need no copy); the operands' H and B may be 1 (broadcast). Returns ne
        [E, L, H, B] contiguous, or with heads_inner ne [E, H, L, B] (a query's heads side by side).
        The caller checks the shapes."""
        E, L = int(v.ne[0]), int(q.ne[1])
        H, B = (max(int(t.ne[i]) for t in (q, kt, v)) for i in (2, 3))
        args = [q, kt, v] + ([mask] if mask is not None else [])
        params = self._userdata((_float_bits(scale, signed=True), int(mask is not None), int(heads_inner)),
                                "attention")
        ne = (E, H, L, B) if heads_inner else (E, L, H, B)
        return lib.ggml_custom_4d(ctx, lib.GGML_TYPE_F32, *ne, ffi.new("struct ggml_tensor *[]", args),
                                  len(args), self._attention_fn, N_TASKS_MAX, params)

    def _userdata(self, values: tuple, kind: str = "conv"):
        """An int32 array of a kernel's parameters, made once per distinct (kind, values) and kept
        here: the graphs hold its address."""
        key = (kind, *values)
        params = self._params.get(key)
        if params is None:
            params = self._params[key] = ffi.new("int32_t[]", list(values))
        return params


def _float_bits(x: float, signed: bool = False) -> int:
    """The bits of float32(x) as an integer (unsigned, or as int32 for an int32 array)."""
    return struct.unpack("<i" if signed else "<I", struct.pack("<f", x))[0]


def relu(ctx, x, k: Kernels | None = None):
    """The ReLU of every front end (ag_relu, ONNX Relu, the Keras-like models): max(x, 0) with NaN
    kept and relu(-inf) = 0, PyTorch's and onnxruntime's values (ggml's relu maps NaN to 0, a
    silent wrong value). With the kernels `k` (a graph for ggml's CPU backend that ggml's own
    backward will not differentiate), one pass of kernels.c; otherwise ggml ops that every backend
    runs and ggml's backward differentiates: relu(x) + 0 * exp(-|x|), whose last term is 0 for
    every number, infinities included, and NaN exactly where x is."""
    if k is not None and x.type == lib.GGML_TYPE_F32:
        return k.relu(ctx, x)
    nan_of_x = lib.ggml_scale(ctx, lib.ggml_exp(ctx, lib.ggml_neg(ctx, lib.ggml_abs(ctx, x))), 0.0)
    return lib.ggml_add(ctx, lib.ggml_relu(ctx, x), nan_of_x)


def keep_nan(ctx, fx, x, k: Kernels | None = None):
    """fx = f(x), computed by a ggml op that maps NaN to a number (clamp, leaky_relu), with x's NaN
    put back, so NaN propagates as in PyTorch and onnxruntime. With the kernels `k` one pass;
    otherwise fx + 0 * tanh(x), whose last term is 0 for every number and infinity."""
    if k is not None and x.type == fx.type == lib.GGML_TYPE_F32:
        return k.keep_nan(ctx, fx, x)
    return lib.ggml_add(ctx, fx, lib.ggml_scale(ctx, lib.ggml_tanh(ctx, x), 0.0))


def extremum(ctx, a, b, larger: bool, k: Kernels | None = None):
    """max(a, b) (or min) element-wise, b broadcast to a's shape; NaN where either is NaN. With the
    kernels `k` exact for every number and infinity; otherwise a select by ggml's step, exact for
    numbers (an infinite operand gives NaN there: inf * 0)."""
    if any(a.ne[i] != b.ne[i] for i in range(4)):
        b = lib.ggml_repeat(ctx, b, a)
    if k is not None and a.type == b.type == lib.GGML_TYPE_F32:
        return k.extremum(ctx, a, b, larger)
    d = lib.ggml_sub(ctx, b, a)
    m = lib.ggml_step(ctx, d if larger else lib.ggml_neg(ctx, d))  # 1 where b wins
    return lib.ggml_add(ctx, lib.ggml_mul(ctx, a, lib.ggml_scale_bias(ctx, m, -1.0, 1.0)), lib.ggml_mul(ctx, b, m))


def gemm_fits(a, b) -> bool:
    """Whether cblas_sgemm's int sizes and leading dimensions can describe these operands."""
    return max(a.ne[0], a.ne[1], b.ne[0], b.ne[1], a.nb[1] // 4, b.nb[1] // 4) < 1 << 31


def _blas_readable(x) -> bool:
    """Whether BLAS can read x's matrices as they are: unit element stride, columns not overlapping."""
    return x.nb[0] == 4 and x.nb[1] >= 4 * x.ne[0]


def _rows_contiguous(ctx, x):
    """x itself where BLAS can read its matrices, else a contiguous copy."""
    return x if _blas_readable(x) else lib.ggml_cont(ctx, x)


def _gemm_operand(x):
    """(tensor, transposed) that a product operand x is read from without a copy: x itself, or
    the source of a transposed view of one; None when neither can be read (or x is not f32)."""
    if x.type != lib.GGML_TYPE_F32:
        return None
    if _blas_readable(x):
        return x, False
    if x.op == lib.GGML_OP_TRANSPOSE and _blas_readable(x.src[0]):
        return x.src[0], True
    return None


def _contiguous(ctx, x):
    return x if lib.ggml_is_contiguous(x) else lib.ggml_cont(ctx, x)
