// Declarations beside cdef.h, written by hand: ggml.h's custom-op entry points (which
// scripts/gen_cdef.py leaves out of cdef.h) in the form ggmlpy's kernels call them, and the
// functions those kernels export (ggmlpy/kernels/*.c, compiled on first use; resolved on the
// library ggmlpy.kernels loads, never on libggml).
typedef void (*ggml_custom1_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
typedef void (*ggml_custom2_op_t)(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_map_custom1(struct ggml_context * ctx, struct ggml_tensor * a, ggml_custom1_op_t fun, int n_tasks, void * userdata);
struct ggml_tensor * ggml_map_custom2(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b, ggml_custom2_op_t fun, int n_tasks, void * userdata);
typedef void (*ggml_custom_op_t)(struct ggml_tensor * dst, int ith, int nth, void * userdata);
struct ggml_tensor * ggml_custom_4d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0, int64_t ne1,
    int64_t ne2, int64_t ne3, struct ggml_tensor ** args, int n_args, ggml_custom_op_t fun, int n_tasks, void * userdata);
// kernels.c
void ggmlpy_gelu_erf_f32(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
void ggmlpy_relu_f32(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
void ggmlpy_gelu_deriv_f32(struct ggml_tensor * dst, const struct ggml_tensor * a, int ith, int nth, void * userdata);
void ggmlpy_gelu_back_f32(struct ggml_tensor * dst, const struct ggml_tensor * g, const struct ggml_tensor * x, int ith, int nth, void * userdata);
void ggmlpy_sum_rows_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_keep_nan_f32(struct ggml_tensor * dst, const struct ggml_tensor * fx, const struct ggml_tensor * x, int ith, int nth, void * userdata);
void ggmlpy_extremum_f32(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, int ith, int nth, void * userdata);
void ggmlpy_layer_norm_back_f32(struct ggml_tensor * dst, const struct ggml_tensor * g, const struct ggml_tensor * x, int ith, int nth, void * userdata);
void ggmlpy_cross_entropy_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_qlinear_add_f32(struct ggml_tensor * dst, const struct ggml_tensor * a, const struct ggml_tensor * b, int ith, int nth, void * userdata);
// gemm.c
void ggmlpy_gemm_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
int ggmlpy_blas_parallel(void);
// conv.c
void ggmlpy_conv2d_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_maxpool2d_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_linear_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_linear_packed_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_conv2d_packed_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
int ggmlpy_linear_packed_mr(void);
void ggmlpy_conv2d_pixels_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
int ggmlpy_conv_pixels_rows(int pv);
int ggmlpy_conv_vector_floats(void);
int ggmlpy_conv_params_count(void);
void ggmlpy_im2col_back_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
// rnn.c
void ggmlpy_lstm_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
int ggmlpy_rnn_vector_math(void);
// attention.c
void ggmlpy_attention_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
int ggmlpy_attention_vector_math(void);
// rows.c
void ggmlpy_layernorm_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
void ggmlpy_topk_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
// conv_transpose.c
void ggmlpy_conv_transpose_f32(struct ggml_tensor * dst, int ith, int nth, void * userdata);
