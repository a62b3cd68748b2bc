"""Garbage into the utility and backend functions (run by test_lowlevel_ext in a child process):
every call must return or raise one of the allowed errors; an abort kills the child and fails the test."""
import numpy as np, ggmlpy as g, itertools, warnings
warnings.simplefilter("ignore")
ok=bad=0
def tryit(f, *a, **k):
    global ok, bad
    print("  ", getattr(f,'__name__',f), [type(x).__name__ for x in a], flush=True)
    try: f(*a, **k); ok+=1
    except (g.GGMLError, ValueError, TypeError, MemoryError, OverflowError, IndexError, OSError): bad += 1
ctx=g.ggml_init(1<<20); na=g.ggml_init(1<<20, no_alloc=True)
t=g.ggml_new_tensor_2d(ctx,0,4,3); u=g.ggml_new_tensor_2d(na,0,4,3); i=g.ggml_new_tensor_1d(ctx,26,4)
h=g.ggml_new_tensor_1d(ctx,1,4); q=g.ggml_transpose(ctx,t)
vals=[t,u,i,h,q,None,3,-1,"x",1.5,2**40]
for f in [g.ggml_get_f32_nd, g.ggml_get_i32_nd, g.ggml_tensor_shape, g.ggml_tensor_nb, g.ggml_set_zero, g.ggml_get_op_params, g.ggml_backend_tensor_get_f32_first, g.ggml_is_transposed, g.ggml_op_desc, g.ggml_get_unary_op]:
    for v in vals: tryit(f, v)
for v,w in itertools.product(vals, repeat=2):
    tryit(g.ggml_tensor_copy, v, w); tryit(g.ggml_are_same_shape, v, w); tryit(g.ggml_can_repeat, v, w)
    tryit(g.ggml_get_f32_nd, v, w); tryit(g.ggml_set_f32_nd, v, 0, value=w); tryit(g.ggml_set_i32_nd, v, w, value=1)
    tryit(g.ggml_get_op_params_i32, v, w); tryit(g.ggml_set_op_params_f32, v, w, 1.0); tryit(g.ggml_set_op_params, v, w)
    tryit(g.ggml_backend_tensor_set_data, v, w); tryit(g.ggml_backend_tensor_get_data, v, w); tryit(g.ggml_tensor_set_f32_scalar, v, w)
    tryit(g.ggml_view_tensor, v, w); tryit(g.ggml_dup_tensor, v, w); tryit(g.ggml_get_next_tensor, v, w)
    tryit(g.ggml_set_param, v); tryit(g.ggml_new_f32, v, w); tryit(g.ggml_new_i32, v, w)
gf=g.ggml_build_forward_expand(ctx, g.ggml_sqr(ctx, t))
for v in [0,1,-1,5,-9,"a",None,2**40]:
    tryit(g.ggml_graph_node, gf, v); tryit(g.ggml_graph_get_tensor, gf, v); tryit(g.ggml_graph_view, gf, v, 1); tryit(g.ggml_graph_view, gf, 0, v)
    tryit(g.ggml_type_size, v); tryit(g.ggml_op_name, v); tryit(g.ggml_unary_op_name, v); tryit(g.ggml_glu_op_name, v); tryit(g.ggml_backend_dev_get, v)
    tryit(g.ggml_backend_reg_get, v); tryit(g.ggml_backend_dev_by_type, v); tryit(g.ggml_set_n_threads, v); tryit(g.ggml_estimate_memory, v, 3)
    tryit(g.ggml_vulkan_device_description, v); tryit(g.ggml_backend_buffer_clear, v, v)
tryit(g.ggml_graph_reset, gf); tryit(g.ggml_graph_print, gf); tryit(g.ggml_graph_dump_dot, gf, None, "/nonexistent/x.dot"); tryit(g.ggml_graph_dump_dot, gf, None, "/proc/x.dot"); tryit(g.ggml_graph_dump_dot, gf, None, "/tmp")
be=g.ggml_backend_cpu_init()
buf=g.ggml_backend_alloc_ctx_tensors(na, be)
for v in [-1, 0, 256, 7, "x"]:
    tryit(g.ggml_backend_buffer_clear, buf, v); tryit(g.ggml_backend_buffer_set_usage, buf, v)
tryit(g.ggml_backend_tensor_set_async, be, u, np.ones(20)); tryit(g.ggml_backend_tensor_get_async, be, u, 3, 5)
tryit(g.ggml_backend_tensor_copy_async, be, be, u, t)
m=g.ggml_backend_multi_buffer_alloc_buffer([buf]); tryit(g.ggml_backend_multi_buffer_alloc_buffer, [m]); tryit(g.ggml_backend_buffer_free, m); tryit(g.ggml_backend_buffer_free, m)
tryit(g.ggml_backend_tensor_get_data, u)
tryit(g.ggml_reset, ctx); tryit(g.ggml_get_f32, t); tryit(g.ggml_graph_compute, ctx, gf)
ctx2=g.ggml_init(1<<20); v=g.ggml_tensor_view(g.ggml_new_f32(ctx2, 1.0)); tryit(g.ggml_reset, ctx2)
s=g.ggml_backend_sched_new([be]); tryit(g.ggml_backend_sched_alloc_graph, s, gf); tryit(g.ggml_backend_sched_set_tensor_backend, s, t, be)
print("survived", ok, bad)
ctx3 = g.ggml_init(1 << 20)
host = g.ggml_new_tensor_1d(ctx3, 0, 4)
hv = g.ggml_view_1d(ctx3, host, 2, 0)
for x in (host, hv):
    tryit(g.ggml_backend_tensor_set_async, be, x, np.ones(4)); tryit(g.ggml_backend_tensor_get_async, be, x)
    tryit(g.ggml_backend_tensor_copy_async, be, be, x, host)
blas = [g.ggml_backend_dev_get(i) for i in range(g.ggml_backend_dev_count())]
for d in blas:
    if g.ggml_backend_dev_name(d) != "CPU":
        ob = g.ggml_backend_dev_init(d)
        tryit(g.ggml_backend_graph_plan_create, ob, gf)
        tryit(g.ggml_backend_event_new, d)
print("survived", ok, bad)
