"""scripts/bench_llama.py's choice of devices: ggmlpy's model on --device, llama.cpp offloaded to a
GPU only where ggmlpy runs on one and llama.cpp's build can, and the reasons it stops with. The
timing itself is the benchmark's (docs/llama.md), not a test's."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ggmlpy as g

from llama_cpp_ref import require_llama_cpp
from test_llm_load import tiny

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(SCRIPTS))  # the script imports benchlib beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_llama_under_test", SCRIPTS / "bench_llama.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize("info,where,want", [
    ({"gpu": False, "backends": ["CPU"]}, "cpu", (0, "CPU")),
    ({"gpu": False, "backends": ["CPU"]}, "cuda", (0, "CPU (its build has no GPU backend)")),
    ({"gpu": True, "backends": ["CPU", "CUDA"]}, "cuda", (-1, "CUDA (all layers offloaded)")),
    ({"gpu": True, "backends": ["CPU", "Vulkan"]}, "vulkan", (-1, "Vulkan (all layers offloaded)")),
    ({"gpu": True, "backends": ["CPU", "CUDA"]}, "cpu", (0, "CPU"))])
def test_llama_cpp_offloads_only_beside_a_gpu_and_where_its_build_can(bench, info, where, want):
    asked = []

    def cpp(**req):
        asked.append(req)
        return info
    assert bench.peer_device(cpp, where) == want
    assert asked == [{"what": "info"}]


def test_ggmlpys_model_goes_to_the_device_or_the_script_says_why_not(bench, tmp_path):
    path, _, _ = tiny(tmp_path, "q8_0")
    model = bench.load_models({"q8_0": path}, "cpu")["q8_0"]
    assert model.token_embd.weight.device_context.name == "CPU"
    missing = [d for d in ("cuda", "vulkan") if not any(x.backend.lower() == d for x in g.devices())]
    for device in missing:
        with pytest.raises(SystemExit, match=f"--device {device}: .*not available"):
            bench.load_models({"q8_0": path}, device)


@pytest.mark.parametrize("args,match", [(["--prompt", "600"], "--prompt must be 1 to 512"),
                                        (["--rounds", "0"], "at least 1"), (["--device", "metal"], "invalid choice")])
def test_bad_settings_stop_before_any_work(bench, args, match, capsys):
    with pytest.raises(SystemExit):
        bench.main(args)
    assert match in capsys.readouterr().err


def test_the_llama_cpp_child_names_its_backends():
    python = require_llama_cpp()
    run = subprocess.run([str(python), str(SCRIPTS / "bench_llama_child.py")], input='{"what": "info"}\n',
                         capture_output=True, text=True, timeout=120, check=True)
    info = json.loads(run.stdout)
    assert isinstance(info["gpu"], bool) and "CPU" in info["backends"]
