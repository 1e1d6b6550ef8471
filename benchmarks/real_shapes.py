"""`sllm bench make-gguf`: GGUF files with real models' shapes and random weights, made the way a user's
file is made: a checkpoint from the published config (`transformers`, saved as bf16 safetensors), converted by
llama.cpp's own convert_hf_to_gguf.py and quantized by its llama-quantize. Nothing is downloaded: the
tokenizer is rebuilt from llama.cpp's own vocabulary file of the family (models/ggml-vocab-*.gguf, read by
our GGUF tokenizer, which tokenizes as llama.cpp does), so the converter recognises its pre-tokenizer.
Random weights make such files good for speed, memory and load time (benchmarks use ignore_eos), not for text.

Needs llama.cpp's source tree with llama-quantize built (scripts/build_llama_server.sh builds both)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

# Published configs (sizes only), and the llama.cpp vocabulary file of each family.
SHAPES: dict[str, tuple[str, dict]] = {
    "qwen2.5-0.5b": ("qwen2", dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645)),
    "llama-3.2-1b": ("llama-bpe", dict(
        model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072, rope_theta=500_000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192},
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128009)),
    "qwen2.5-3b": ("qwen2", dict(
        model_type="qwen2", hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645)),
}


def llama_cpp_tree() -> Path:
    """The llama.cpp source tree (SLLM_LLAMA_CPP_DIR, else where scripts/build_llama_server.sh unpacks it)."""
    from benchmarks.targets import llama_cpp_cache_dir

    env = os.environ.get("SLLM_LLAMA_CPP_DIR")
    if env:
        return Path(env)
    found = sorted(llama_cpp_cache_dir().glob("llama_cpp_python-*/vendor/llama.cpp"))
    if not found:
        raise typer.BadParameter("no llama.cpp source tree: set SLLM_LLAMA_CPP_DIR or run "
                                 "scripts/build_llama_server.sh")
    return found[-1]


def make_gguf(
    shape: str = typer.Argument(..., help=f"One of {', '.join(SHAPES)}"),
    out: Path = typer.Option(Path("."), "--out", help="Folder for the checkpoint and the GGUF files"),
    quant: str = typer.Option("Q4_K_M", "--quant", help="llama-quantize type (Q4_K_M, Q4_0, Q8_0, ...)"),
    seed: int = typer.Option(0, "--seed"),
):
    """Writes OUT/SHAPE-hf (the checkpoint), OUT/SHAPE.f16.gguf and OUT/SHAPE.QUANT.gguf; prints the last."""
    import torch
    import transformers

    from engine.gguf_file import GGUFFile
    from engine.gguf_tokenizer import load_gguf_tokenizer

    if shape not in SHAPES:
        raise typer.BadParameter(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    vocab, config = SHAPES[shape]
    tree = llama_cpp_tree()
    out.mkdir(parents=True, exist_ok=True)
    hf = out / f"{shape}-hf"
    if not (hf / "config.json").exists():
        torch.manual_seed(seed)
        cfg = transformers.AutoConfig.for_model(**config)
        with torch.device("cpu"):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.save_pretrained(hf)
        tokenizer = load_gguf_tokenizer(GGUFFile(tree / "models" / f"ggml-vocab-{vocab}.gguf"))
        tokenizer.save_pretrained(hf)
        del model
    f16 = out / f"{shape}.f16.gguf"
    if not f16.exists():
        env = os.environ | {"PYTHONPATH": str(tree / "gguf-py")}
        subprocess.run([sys.executable, str(tree / "convert_hf_to_gguf.py"), str(hf), "--outtype", "f16",
                        "--outfile", str(f16)], check=True, env=env)
    target = out / f"{shape}.{quant}.gguf"
    if not target.exists():
        quantize = tree / "build" / "bin" / "llama-quantize"
        env = os.environ | {"LD_LIBRARY_PATH": str(quantize.parent)}
        subprocess.run([str(quantize), str(f16), str(target), quant, str(os.cpu_count() or 2)], check=True, env=env)
    print(target)
