"""The README is a front page: short, its quick start is what CI runs, its links lead into docs/.
Its code blocks run with the docs' (tests/test_doc_examples.py)."""
import re

from doc_blocks import ROOT, page_blocks

README = ROOT / "README.md"
MAX_BYTES = 12 * 1024


def test_readme_is_a_front_page():
    size = len(README.read_bytes())
    assert size <= MAX_BYTES, f"README.md is {size} bytes; keep it under {MAX_BYTES} and move detail to docs/"


def test_ci_runs_exactly_the_quick_start_commands():
    """The README's quick start is the whole set-up, and CI (.ci/run) runs it as written."""
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]
    assert len(commands) == 2, commands
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for cmd in commands:
        assert cmd in ci, f".ci/run does not run the README's `{cmd}`"
    assert ci.index(commands[0]) < ci.index(commands[1])


def test_readme_links_lead_to_files():
    text = README.read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert len([link for link in local if link.startswith("docs/")]) >= 10, "the README links into docs/"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_has_an_example_per_front_end():
    """ag_* (autograd and training), the Keras-like API, ONNX and GGUF each have a runnable example;
    the ONNX one needs PyTorch and says how to install it."""
    blocks = [b for b in page_blocks(README.read_text(), "README.md") if b.lang == "python"]
    srcs = [b.src for b in blocks]
    for name in ("ag_fit", "ggml_model_sequential", "onnx_load", "gguf_load"):
        assert any(name in s for s in srcs), f"no README example uses {name}"
    onnx = next(b for b in blocks if "onnx_load" in b.src)
    assert onnx.needs == ["torch"]
    assert "pip install torch==2.13.0" in README.read_text()


def test_readme_onnx_example_uses_torchs_default_exporter_without_a_deprecation_warning():
    """torch's TorchScript exporter (dynamo=False) warns that it is deprecated; the README's example
    uses the default one (dynamo=True), says that it needs onnxscript, and exports without a
    DeprecationWarning."""
    import warnings

    import pytest
    block = next(b for b in page_blocks(README.read_text(), "README.md") if b.lang == "python" and "onnx_load" in b.src)
    assert "dynamo=True" in block.src and "dynamo=False" not in block.src and "onnxscript" in block.src
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    net = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.onnx.export(net, (torch.randn(1, 4),), None, dynamo=True, verbose=False)
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)], [str(w.message) for w in caught]
