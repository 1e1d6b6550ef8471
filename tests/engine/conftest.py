import shutil
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.loader import resolve_model

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    return resolve_model("default")


def make_tiny_llama(folder: Path, tokenizer_from: Path, *, kv_heads: int = 2, tied: bool = False,
                    seed: int = 0, layers: int = 2, vocab_size: int = 49152) -> Path:
    """A random Llama small enough to run in milliseconds, with the default model's tokenizer so text
    paths (stop strings, detokenization) are exercised too. A large init range makes logits peaked,
    so greedy choices are not near-ties that rounding could flip."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=1024,
        tie_word_embeddings=tied, initializer_range=0.2, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, default_model_dir) -> dict[str, Path]:
    """MHA and GQA, tied and untied heads."""
    root = tmp_path_factory.mktemp("tiny")
    return {
        "gqa": make_tiny_llama(root / "gqa", default_model_dir, kv_heads=2, tied=False, seed=1),
        "mha_tied": make_tiny_llama(root / "mha", default_model_dir, kv_heads=4, tied=True, seed=2),
    }


def hf_greedy(folder: Path, prompt_ids: list[int], max_new_tokens: int, eos: bool = False) -> list[int]:
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return hf_greedy_with(model, prompt_ids, max_new_tokens, eos)


def hf_greedy_with(model, prompt_ids: list[int], max_new_tokens: int, eos: bool = False) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=max_new_tokens, min_new_tokens=0 if eos else max_new_tokens, do_sample=False,
            eos_token_id=model.config.eos_token_id if eos else None, pad_token_id=0,
        )
    return out[0, len(prompt_ids):].tolist()


def hf_greedy_choices(model, prompt_ids: list[int], tokens: list[int]) -> list[int]:
    """HF's greedy choice after the prompt and after each prefix of `tokens`, from one forward pass over
    prompt + tokens[:-1]: it equals `tokens` exactly when HF's greedy decoding of the prompt gives `tokens`
    (each choice is the argmax given the ones before it), without a `generate` step per token, each of
    which reads all the weights of a real-size model once."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + tokens[:-1]])).logits[0, len(prompt_ids) - 1:]
    return logits.argmax(-1).tolist()
