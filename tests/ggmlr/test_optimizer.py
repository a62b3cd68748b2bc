"""Port of ggmlR's tests/testthat/test-optimizer.R: ggml's training API (ggml_opt_*).

ggmlR's dataset data/labels are tensors; here they are writable numpy views of the same memory
(samples as rows, so R's column-major [ne, ndata] order is the same bytes), and R's
ggml_backend_tensor_set_data on them is a numpy assignment. expect_silent is "returns None".
"""
import inspect

import numpy as np

import ggmlpy as g


def test_optimizer_type_constants_work():
    loss_types = [g.ggml_opt_loss_type_mean(), g.ggml_opt_loss_type_sum(),
                  g.ggml_opt_loss_type_cross_entropy(), g.ggml_opt_loss_type_mse()]
    assert all(isinstance(v, int) for v in loss_types)
    assert len(set(loss_types)) == 4
    assert isinstance(g.ggml_opt_optimizer_type_adamw(), int)
    assert isinstance(g.ggml_opt_optimizer_type_sgd(), int)
    assert g.ggml_opt_optimizer_type_adamw() != g.ggml_opt_optimizer_type_sgd()


def test_optimizer_names_work():
    adamw_name = g.ggml_opt_optimizer_name(g.ggml_opt_optimizer_type_adamw())
    sgd_name = g.ggml_opt_optimizer_name(g.ggml_opt_optimizer_type_sgd())
    assert isinstance(adamw_name, str) and isinstance(sgd_name, str)
    assert len(adamw_name) > 0
    assert len(sgd_name) > 0


def test_dataset_creation_and_destruction_works():
    dataset = g.ggml_opt_dataset_init(type_data=g.GGML_TYPE_F32, type_label=g.GGML_TYPE_F32, ne_datapoint=10,
                                      ne_label=1, ndata=100, ndata_shard=1)
    assert dataset is not None
    assert g.ggml_opt_dataset_ndata(dataset) == 100
    assert g.ggml_opt_dataset_data(dataset) is not None
    assert g.ggml_opt_dataset_labels(dataset) is not None
    assert g.ggml_opt_dataset_free(dataset) is None


def test_dataset_without_labels_works():
    dataset = g.ggml_opt_dataset_init(type_data=g.GGML_TYPE_F32, type_label=g.GGML_TYPE_F32, ne_datapoint=10,
                                      ne_label=0, ndata=50, ndata_shard=1)
    assert dataset is not None
    assert g.ggml_opt_dataset_ndata(dataset) == 50
    assert g.ggml_opt_dataset_labels(dataset) is None
    g.ggml_opt_dataset_free(dataset)


def test_result_creation_and_operations_work():
    result = g.ggml_opt_result_init()
    assert result is not None
    assert g.ggml_opt_result_ndata(result) == 0
    loss_info = g.ggml_opt_result_loss(result)
    assert all(isinstance(v, float) for v in loss_info)
    assert len(loss_info) == 2
    assert "loss" in loss_info._fields
    assert "uncertainty" in loss_info._fields
    acc_info = g.ggml_opt_result_accuracy(result)
    assert all(isinstance(v, float) for v in acc_info)
    assert len(acc_info) == 2
    assert "accuracy" in acc_info._fields
    assert "uncertainty" in acc_info._fields
    assert g.ggml_opt_result_reset(result) is None
    assert g.ggml_opt_result_free(result) is None


def test_optimizer_context_creation_works_with_cpu_backend():
    cpu = g.ggml_backend_cpu_init()
    assert cpu is not None
    sched = g.ggml_backend_sched_new([cpu], parallel=False)
    assert sched is not None
    params = g.ggml_opt_default_params(sched, g.ggml_opt_loss_type_mse())
    assert isinstance(params, dict)
    assert "loss_type" in params
    assert "optimizer" in params
    opt_ctx = g.ggml_opt_init(sched=sched, loss_type=g.ggml_opt_loss_type_mse(),
                              optimizer=g.ggml_opt_optimizer_type_adamw(), opt_period=1)
    assert opt_ctx is not None
    assert g.ggml_opt_context_optimizer_type(opt_ctx) == g.ggml_opt_optimizer_type_adamw()
    assert isinstance(g.ggml_opt_static_graphs(opt_ctx), bool)
    assert g.ggml_opt_reset(opt_ctx, optimizer=False) is None
    assert g.ggml_opt_reset(opt_ctx, optimizer=True) is None
    assert g.ggml_opt_free(opt_ctx) is None
    g.ggml_backend_sched_free(sched)
    g.ggml_backend_free(cpu)


def test_optimizer_context_works_with_sgd():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu], parallel=False)
    opt_ctx = g.ggml_opt_init(sched=sched, loss_type=g.ggml_opt_loss_type_cross_entropy(),
                              optimizer=g.ggml_opt_optimizer_type_sgd(), opt_period=4)
    assert opt_ctx is not None
    assert g.ggml_opt_context_optimizer_type(opt_ctx) == g.ggml_opt_optimizer_type_sgd()
    g.ggml_opt_free(opt_ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_backend_free(cpu)


def test_dataset_batch_operations_work():
    cpu = g.ggml_backend_cpu_init()
    ne_datapoint, ne_label, ndata, batch_size = 4, 2, 10, 2
    dataset = g.ggml_opt_dataset_init(type_data=g.GGML_TYPE_F32, type_label=g.GGML_TYPE_F32,
                                      ne_datapoint=ne_datapoint, ne_label=ne_label, ndata=ndata, ndata_shard=1)
    data_tensor = g.ggml_opt_dataset_data(dataset)
    labels_tensor = g.ggml_opt_dataset_labels(dataset)
    data_tensor.reshape(-1)[:] = np.arange(1, ne_datapoint * ndata + 1)       # R: tensor_set_data(seq_len(...))
    labels_tensor.reshape(-1)[:] = np.arange(1, ne_label * ndata + 1)
    ctx = g.ggml_init_auto(1024 * 1024, no_alloc=True)
    data_batch = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, ne_datapoint, batch_size)
    labels_batch = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, ne_label, batch_size)
    buffer = g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
    assert buffer is not None
    assert g.ggml_opt_dataset_get_batch(dataset, data_batch, labels_batch, ibatch=0) is None
    batch_data = g.ggml_backend_tensor_get_data(data_batch)
    assert len(batch_data) == ne_datapoint * batch_size
    # beyond R's count: without a shuffle, batch 0 is the first two samples
    np.testing.assert_array_equal(batch_data, np.arange(1, 9))
    np.testing.assert_array_equal(g.ggml_backend_tensor_get_data(labels_batch), np.arange(1, 5))
    g.ggml_backend_buffer_free(buffer)
    g.ggml_free(ctx)
    g.ggml_opt_dataset_free(dataset)
    g.ggml_backend_free(cpu)


def test_dataset_shuffle_works():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu], parallel=False)
    opt_ctx = g.ggml_opt_init(sched=sched, loss_type=g.ggml_opt_loss_type_mse(),
                              optimizer=g.ggml_opt_optimizer_type_adamw())
    dataset = g.ggml_opt_dataset_init(type_data=g.GGML_TYPE_F32, type_label=g.GGML_TYPE_F32, ne_datapoint=10,
                                      ne_label=1, ndata=100, ndata_shard=1)
    assert g.ggml_opt_dataset_shuffle(opt_ctx, dataset, idata=-1) is None
    assert g.ggml_opt_dataset_shuffle(opt_ctx, dataset, idata=50) is None
    g.ggml_opt_dataset_free(dataset)
    g.ggml_opt_free(opt_ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_backend_free(cpu)


def test_different_loss_types_work():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu], parallel=False)
    loss_types = {"mean": g.ggml_opt_loss_type_mean(), "sum": g.ggml_opt_loss_type_sum(),
                  "cross_entropy": g.ggml_opt_loss_type_cross_entropy(), "mse": g.ggml_opt_loss_type_mse()}
    for name, lt in loss_types.items():
        opt_ctx = g.ggml_opt_init(sched=sched, loss_type=lt, optimizer=g.ggml_opt_optimizer_type_adamw())
        assert opt_ctx is not None, f"Failed for loss type: {name}"
        g.ggml_opt_free(opt_ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_backend_free(cpu)


def test_opt_period_parameter_works():
    cpu = g.ggml_backend_cpu_init()
    sched = g.ggml_backend_sched_new([cpu], parallel=False)
    for period in (1, 2, 4, 8):
        opt_ctx = g.ggml_opt_init(sched=sched, loss_type=g.ggml_opt_loss_type_mse(),
                                  optimizer=g.ggml_opt_optimizer_type_adamw(), opt_period=period)
        assert opt_ctx is not None, f"Failed for opt_period: {period}"
        g.ggml_opt_free(opt_ctx)
    g.ggml_backend_sched_free(sched)
    g.ggml_backend_free(cpu)


def test_ggml_opt_result_pred_returns_integer_vector():
    result = g.ggml_opt_result_init()
    assert result is not None
    pred = g.ggml_opt_result_pred(result)
    assert pred.dtype.kind == "i"
    assert len(pred) == 0
    g.ggml_opt_result_free(result)


def test_ggml_opt_grad_acc_function_exists():
    assert callable(g.ggml_opt_grad_acc)


def test_ggml_opt_prepare_alloc_function_exists():
    assert callable(g.ggml_opt_prepare_alloc)


def test_ggml_opt_epoch_function_exists():
    assert callable(g.ggml_opt_epoch)


def test_ggml_opt_epoch_accepts_r_callback_functions():
    def my_callback(train, ibatch, ibatch_max, t_start_us, result):
        return True
    assert callable(my_callback)
    args = inspect.signature(g.ggml_opt_epoch).parameters
    assert "callback_train" in args
    assert "callback_eval" in args
