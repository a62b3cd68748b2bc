"""inst/examples/basic_usage.R"""
import ggmlpy as g


def test_basic_usage(capsys):
    # Проверка версии
    print("GGML version:", g.ggml_version())

    # Тест библиотеки
    g.ggml_test()

    # Создание контекста
    ctx = g.ggml_init(16 * 1024 * 1024)  # 16MB
    print("Context created successfully")

    # Освобождение ресурсов
    g.ggml_free(ctx)
    print("Context freed")

    out = capsys.readouterr().out.splitlines()
    # ggmlR prints its bundled ggml's version (0.11.0); ggmlpy's is the pinned ggml's
    assert out == [f"GGML version: {g.ggml_version()}", "GGML library loaded successfully!",
                   f"GGML version: {g.ggml_version()}", f"Tensor overhead: {g.ggml_tensor_overhead()} bytes",
                   "Context created successfully", "Context freed"]
