"""ggmlpy's llm_generate against llama.cpp (llama-cpp-python from the pinned sdist, in a child
process) on the same ~50M-parameter llama model, random weights written with the `gguf` package
in q8_0 and in q4_K: greedy decode after a 16-token prompt (time per token) and prompt processing
of 512 tokens (time), one thread and two, interleaved round by round so both see the same load.

    python scripts/bench_llama.py [--rounds 5] [--decode 64] [--threads 1 2] [--prompt 512]
    python scripts/bench_llama.py --threads 2 --rounds 2 --decode 16   # a loaded machine: see below
    python scripts/bench_llama.py --device cuda --rounds 2 --decode 16 --threads 1 --prompt 128

--device (cpu, vulkan or cuda) is where ggmlpy's model is loaded (llm_load(path, device=)).
llama.cpp is the CPU build scripts/llama_cpp_env.py makes: on a GPU it offloads all its layers only
where its build can (llama_supports_gpu_offload), and stays on the CPU otherwise. Every table says
which device each side ran on. --models picks the files (q8_0, q4_K or both).

The model: vocab 32000, d_model 512, 6 layers, 8 heads (4 key/value heads), feed-forward 1536
(51.7M parameters), context 1024, written once into <cache>/bench_llama/ and reused. Both sides
keep an f32 KV cache. ggmlpy's decode time per token is llm_generate's time for the prompt and
n + 1 tokens less its prompt's, over n; llama.cpp's is its loop of n one-token evals, each
followed by the argmax of the last logits (timed in the child, so the pipe is not in it).
The tokens both chose are printed too (how many agree from the first): llm_generate builds
llama.cpp's graph, so all of them should; a difference in the last bit anywhere (another
summation order) shows there, as q8_0's and q4_K's quantized activations can turn it into a
different token where two logits nearly tie.
Prompt processing: ggmlpy's prompt graph (a cache of 512 positions) against llama.cpp's eval of
the --prompt tokens (512) from an empty cache (one batch). ggmlpy runs with dynamic threads off: exactly the
threads asked for, as llama.cpp. Each figure is the median over rounds of the per-round ratio
ggmlpy / llama.cpp (lower is better for ggmlpy); the last line is

    summary: decode q8_0 X.XXx, q4_K X.XXx, prompt X.XXx llama.cpp (1 thread)

with the prompt figure the first model's (q8_0 unless --models leaves it out) and the fewest threads
asked for, followed by the devices.

On a machine whose cores other processes keep busy, llama.cpp's two threads wait for each other by
spinning, and a token can take a second: a two-thread run there needs few tokens.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchlib import loadavg, machine

import ggmlpy as g
from ggmlpy._buildinfo import LLAMA_CPP_PYTHON_VERSION, cache_dir
from ggmlpy.errors import DeviceError, GGMLError
from ggmlpy.quant.llm_decode import LlmDecoder, decoder_for

VOCAB, D, LAYERS, HEADS, KV_HEADS, FF, CONTEXT = 32000, 512, 6, 8, 4, 1536, 1024
CHILD = Path(__file__).with_name("bench_llama_child.py")


def write_model(path: Path, qtype: str) -> None:
    """The benchmark's llama model, random weights (seed 0), projections and token table in qtype."""
    import gguf
    rng = np.random.default_rng(0)
    t = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_K": gguf.GGMLQuantizationType.Q4_K}[qtype]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("bench")
    for key, value in [("context_length", CONTEXT), ("embedding_length", D), ("block_count", LAYERS),
                       ("feed_forward_length", FF), ("attention.head_count", HEADS),
                       ("attention.head_count_kv", KV_HEADS), ("vocab_size", VOCAB)]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(VOCAB - 3)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([2, 3, 3] + [1] * (VOCAB - 3))

    def typed(name, out, inp):
        values = rng.normal(0.0, 1.0 / np.sqrt(inp), size=(out, inp)).astype(np.float32)
        q = g.ggml_quantize_chunk(int(t), values, out, inp).reshape(out, -1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)

    kv = D // HEADS * KV_HEADS
    typed("token_embd.weight", VOCAB, D)
    for i in range(LAYERS):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(D, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(D, np.float32))
        for name, out, inp in (("attn_q", D, D), ("attn_k", kv, D), ("attn_v", kv, D), ("attn_output", D, D),
                               ("ffn_gate", FF, D), ("ffn_up", FF, D), ("ffn_down", D, FF)):
            typed(f"blk.{i}.{name}.weight", out, inp)
    w.add_tensor("output_norm.weight", np.ones(D, np.float32))
    typed("output.weight", VOCAB, D)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model_file(qtype: str) -> Path:
    path = cache_dir() / "bench_llama" / f"llama-51M-{qtype}.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        write_model(tmp, qtype)
        tmp.rename(path)
    return path


class LlamaCpp:
    """The child process running llama.cpp, one request at a time."""

    def __init__(self):
        python = cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "python"
        if not python.exists():
            sys.exit(f"llama-cpp-python is not built ({python}): run scripts/llama_cpp_env.py first")
        self.proc = subprocess.Popen([str(python), str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def __call__(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit("the llama.cpp child exited")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def ggmlpy_decode(model, prompt, n: int, prompt_decoder_time: float) -> tuple[float, list]:
    t0 = time.perf_counter()
    out = g.llm_generate(model, prompt, max_new_tokens=n + 1)
    return (time.perf_counter() - t0 - prompt_decoder_time) / n, out.tolist()


def load_models(files: dict, device: str) -> dict:
    """{qtype: the model} on `device`; exits with the reason where this libggml lacks the device."""
    try:
        return {q: g.llm_load(f, device=device) for q, f in files.items()}
    except (DeviceError, GGMLError) as e:
        sys.exit(f"--device {device}: {e}")


def peer_device(cpp: LlamaCpp, device: str) -> tuple[int, str]:
    """llama.cpp's layers to offload and the device it runs on: a GPU only when ggmlpy runs on one
    and llama.cpp's build can offload (its CPU build cannot)."""
    info = cpp(what="info")
    gpus = [b for b in info["backends"] if b != "CPU"]
    if device != "cpu" and info["gpu"]:
        return -1, f"{'/'.join(gpus) or 'GPU'} (all layers offloaded)"
    return 0, "CPU" + (" (its build has no GPU backend)" if device != "cpu" else "")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds counted, after one that warms up")
    p.add_argument("--decode", type=int, default=64, help="tokens decoded after the 16-token prompt")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--prompt", type=int, default=512, help="tokens of the prompt-processing figure (1 to 512)")
    p.add_argument("--models", nargs="+", choices=("q8_0", "q4_K"), default=["q8_0", "q4_K"])
    p.add_argument("--device", choices=("cpu", "vulkan", "cuda"), default="cpu", help="where ggmlpy's model runs")
    args = p.parse_args(argv)
    if not 1 <= args.prompt <= 512:
        p.error("--prompt must be 1 to 512 tokens (llama.cpp evaluates it as one batch of at most 512)")
    if args.rounds < 1 or args.decode < 1 or min(args.threads) < 1:
        p.error("--rounds, --decode and --threads must be at least 1")
    g.set_dynamic_threads(False)
    files = {q: model_file(q) for q in dict.fromkeys(args.models)}
    models = load_models(files, args.device)
    cpp = LlamaCpp()
    gpu_layers, peer = peer_device(cpp, args.device)
    ours = next(iter(models.values())).token_embd.weight.device_context.name
    devices = f"ggmlpy on {ours}, llama.cpp on {peer}"
    theirs_on = peer.split(" (")[0]  # the device alone, for each round's line
    print(f"{machine()}; loadavg {loadavg()}", flush=True)
    print(f"model: llama, vocab {VOCAB}, d_model {D}, {LAYERS} layers, {HEADS} heads ({KV_HEADS} key/value), "
          f"feed-forward {FF}; decode {args.decode} tokens after 16, prompt {args.prompt}; {args.rounds} rounds",
          flush=True)
    print(f"devices: {devices}", flush=True)
    rng = np.random.default_rng(1)
    prompt16 = rng.integers(3, VOCAB, size=16).tolist()
    prompt_long = rng.integers(3, VOCAB, size=args.prompt).tolist()
    prompt_decoders = {q: LlmDecoder(m, args.prompt) for q, m in models.items()}
    ratios: dict = {}
    try:
        for r in range(args.rounds + 1):
            for threads in args.threads:
                g.set_num_threads(threads)
                for q, model in models.items():
                    # the 16-token prompt's own time (on the decoder llm_generate keeps), taken out of its
                    short = decoder_for(model, 256)
                    short.run(np.array(prompt16), 0)
                    t0 = time.perf_counter()
                    short.run(np.array(prompt16), 0)
                    t16 = time.perf_counter() - t0
                    dec = prompt_decoders[q]
                    order = (0, 1) if r % 2 == 0 else (1, 0)
                    got = {}
                    for side in order:
                        if side == 0:
                            got["ggmlpy"] = ggmlpy_decode(model, prompt16, args.decode, t16)
                        else:
                            reply = cpp(model=str(files[q]), threads=threads, what="decode", prompt=prompt16,
                                        n=args.decode, gpu_layers=gpu_layers)
                            got["llama.cpp"] = (reply["seconds"], reply["tokens"])
                    mine, theirs = got["ggmlpy"][1][:args.decode], got["llama.cpp"][1]
                    same = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(theirs))
                    ratio = got["ggmlpy"][0] / got["llama.cpp"][0]
                    if r:  # round 0 warms both up (first touches of the weights, caches, thread pools)
                        ratios.setdefault(("decode", q, threads), []).append(ratio)
                    print(f"round {r} {threads} thread{'s' if threads > 1 else ' '} decode {q}: ggmlpy ({ours}) "
                          f"{got['ggmlpy'][0] * 1e3:6.2f} ms/token, llama.cpp ({theirs_on}) "
                          f"{got['llama.cpp'][0] * 1e3:6.2f} ms/token, {ratio:.2f}x, the same first {same} tokens; "
                          f"loadavg {loadavg()}", flush=True)
                    for side in order:
                        if side == 0:
                            t0 = time.perf_counter()
                            dec.run(np.array(prompt_long), 0)
                            got["ggmlpy"] = time.perf_counter() - t0
                        else:
                            got["llama.cpp"] = cpp(model=str(files[q]), threads=threads, what="prompt",
                                                   prompt=prompt_long, gpu_layers=gpu_layers)["seconds"]
                    ratio = got["ggmlpy"] / got["llama.cpp"]
                    if r:
                        ratios.setdefault(("prompt", q, threads), []).append(ratio)
                    print(f"round {r} {threads} thread{'s' if threads > 1 else ' '} prompt {q}: ggmlpy ({ours}) "
                          f"{got['ggmlpy'] * 1e3:7.1f} ms, llama.cpp ({theirs_on}) {got['llama.cpp'] * 1e3:7.1f} ms, "
                          f"{ratio:.2f}x; loadavg {loadavg()}", flush=True)
    finally:
        cpp.close()
    print(f"medians of the per-round ratios, ggmlpy / llama.cpp time ({devices}):")
    med = {k: statistics.median(v) for k, v in ratios.items()}
    for (what, q, threads), v in sorted(med.items()):
        spread = f"{min(ratios[(what, q, threads)]):.2f}-{max(ratios[(what, q, threads)]):.2f}"
        print(f"  {what:6s} {q:5s} {threads} thread{'s' if threads > 1 else ' '}: {v:.2f}x (rounds {spread})")
    print(f"loadavg {loadavg()}")
    one = min(args.threads)
    decode = ", ".join(f"{q} {med[('decode', q, one)]:.2f}x" for q in models)
    print(f"summary: decode {decode}, prompt {med[('prompt', next(iter(models)), one)]:.2f}x llama.cpp "
          f"({one} thread{'s' if one > 1 else ''}; {devices})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
