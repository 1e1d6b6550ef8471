"""Every architecture family we serve gives HF transformers' greedy tokens, from a tiny random checkpoint
saved by transformers itself (an HF folder of safetensors), on every instruction-set path of the C++
kernels this CPU runs: mixed batches, chunked prefill and prefix-cache hits. Each family's own parts are
made to matter: random norm weights (Gemma's zero-initialised (1 + w) ones included), q/k norms with a
head_dim unlike hidden / heads (Qwen3), multipliers far from 1 (Granite), fused checkpoint matrices,
partial rotary and LongRoPE past the original context (Phi-3), a layer without RoPE (SmolLM3),
sliding-window layers beside global ones with prompts longer than the window (Gemma 3, Mistral), and Gemma 4's
own parts: global layers with another head size, keys as values, KV caches shared across layers, per-layer
embeddings and scalars."""

import random
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from engine import LLM, SamplingParams
from tests.cpu_paths import cpu_paths
from tests.engine.conftest import TOKENIZER_FILES, hf_greedy_with

MAX_NEW = 10
TINY = {
    "vocab_size": 49152, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
    "initializer_range": 0.2, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}
WINDOW = 13  # not a multiple of the block size: a window's first key falls inside a block
ORIGINAL_CONTEXT = 48  # Phi-3's original_max_position_embeddings: longer prompts take the long factors

FAMILIES = {
    "qwen3": lambda: transformers.Qwen3Config(**TINY, head_dim=32),
    "granite": lambda: transformers.GraniteConfig(
        **TINY, embedding_multiplier=6.0, residual_multiplier=0.4, attention_multiplier=0.15, logits_scaling=0.5),
    "phi3": lambda: transformers.Phi3Config(
        **{**TINY, "max_position_embeddings": 512}, original_max_position_embeddings=ORIGINAL_CONTEXT,
        partial_rotary_factor=0.5,
        rope_scaling={"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.5, 2.0],
                      "long_factor": [3.0, 5.0, 9.0, 20.0]}),
    "smollm3": lambda: transformers.SmolLM3Config(**TINY, no_rope_layers=[1, 0]),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **TINY, head_dim=16, query_pre_attn_scalar=24, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"], rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1_000_000.0}}),
    "mistral_window": lambda: transformers.MistralConfig(**TINY, sliding_window=WINDOW),
    # Ministral 3: YaRN, and queries scaled past the original context (prompts cross it).
    "ministral3": lambda: transformers.Ministral3Config(**TINY, head_dim=16, rope_parameters={
        "rope_type": "yarn", "rope_theta": 1_000_000.0, "factor": 8.0, "original_max_position_embeddings": 32,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}),
    # Gemma 4: a sliding and a global layer with their own head sizes (the global one with keys as values and
    # one KV head), then two layers that share their caches (wider MLPs), per-layer embeddings, soft-capping.
    # A smaller init range: Gemma 4 sums more branches into the residual, and 0.2 saturates the logits.
    "gemma4": lambda: transformers.Gemma4TextConfig(
        **{**TINY, "num_hidden_layers": 4, "initializer_range": 0.05}, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2, use_double_wide_mlp=True,
        sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"] * 2,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=TINY["vocab_size"], final_logit_softcapping=30.0),
}
per_path = pytest.mark.parametrize("cpu_path", cpu_paths(16), indirect=True)


def make_tiny(folder: Path, config, tokenizer_from: Path, seed: int,
              auto: type = transformers.AutoModelForCausalLM) -> Path:
    """A random model of `config` saved with save_pretrained, with every norm weight randomised too (HF
    initialises them to 1, Gemma 3's to 0) and Gemma 4's per-layer scalars (1), and the default model's
    tokenizer."""
    torch.manual_seed(seed)
    model = auto.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn_like(p) * 0.3 + (0.0 if config.model_type == "gemma3_text" else 1.0))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(torch.rand_like(b) + 0.5)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).exists():
            shutil.copy(tokenizer_from / name, folder / name)
    return folder


class Family:
    def __init__(self, name: str, folder: Path, auto: type = transformers.AutoModelForCausalLM):
        self.name, self.folder = name, folder
        self.model = auto.from_pretrained(folder, dtype=torch.float32).eval()
        self.answers: dict[tuple, list[int]] = {}

    def hf(self, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
        for p in prompts:
            if (key := (tuple(p), max_new)) not in self.answers:
                self.answers[key] = hf_greedy_with(self.model, p, max_new)
        return [self.answers[tuple(p), max_new] for p in prompts]

    def ours(self, prompts: list[list[int]], max_new: int = MAX_NEW, llm: LLM | None = None,
             **config) -> list[list[int]]:
        llm = llm or LLM(model=str(self.folder), **config)
        params = SamplingParams(temperature=0, max_tokens=max_new, ignore_eos=True)
        outs = llm.generate(prompts, params, use_tqdm=False)
        llm.engine.block_manager.check_no_leak()
        return [o.outputs[0].token_ids for o in outs]


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory, default_model_dir) -> Family:
    name = request.param
    folder = make_tiny(tmp_path_factory.mktemp(name), FAMILIES[name](), default_model_dir, seed=len(name))
    return Family(name, folder)


def prompts_of(n: int, seed: int, lo: int, hi: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 49152) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@per_path
def test_mixed_batch_equals_hf(family, cpu_path):
    # Short and long prompts together: most are longer than the window, some past Phi-3's original length.
    prompts = prompts_of(5, seed=1, lo=3, hi=80)
    assert family.ours(prompts, num_kv_blocks=128, block_size=8) == family.hf(prompts)


@per_path
def test_chunked_prefill_equals_hf(family, cpu_path):
    prompts = prompts_of(3, seed=2, lo=30, hi=70)
    assert family.ours(prompts, num_kv_blocks=128, block_size=8, max_num_batched_tokens=7) == family.hf(prompts)


@per_path
def test_prefix_cache_hits_equal_hf(family, cpu_path):
    shared = prompts_of(1, seed=3, lo=40, hi=40)[0]
    prompts = [shared + tail for tail in prompts_of(3, seed=4, lo=1, hi=9)]
    expected = family.hf(prompts)
    llm = LLM(model=str(family.folder), num_kv_blocks=128, block_size=8)
    first = family.ours(prompts[:1], llm=llm)
    rest = family.ours(prompts[1:], llm=llm)
    assert llm.engine.block_manager.prefix_hits >= 2 * 40 // 8 * 8
    assert first + rest == expected


def test_phi3_long_factors_past_the_original_context(family):
    """LongRoPE as HF applies it: a prompt longer than the original context takes the long factors for
    every token; a shorter one keeps the short factors, and generated tokens past the original length
    take the long ones. Both kinds in one batch, and with the prompt in chunks."""
    if family.name != "phi3":
        pytest.skip("Phi-3 only")
    long_prompt = prompts_of(1, seed=5, lo=ORIGINAL_CONTEXT + 20, hi=ORIGINAL_CONTEXT + 20)[0]
    crossing = prompts_of(1, seed=6, lo=ORIGINAL_CONTEXT - 4, hi=ORIGINAL_CONTEXT - 4)[0]
    prompts = [long_prompt, crossing]
    expected = family.hf(prompts, max_new=16)
    assert family.ours(prompts, max_new=16, num_kv_blocks=128) == expected
    assert family.ours(prompts, max_new=16, num_kv_blocks=128, max_num_batched_tokens=16) == expected


def test_gemma4_multimodal_checkpoint_serves_its_text_model(tmp_path, default_model_dir):
    """A Gemma4ForConditionalGeneration checkpoint (how Gemma 4 ships): its text model, the vision tower's
    weights left aside, gives HF's greedy tokens for text prompts; the KV-shared layers keep no cache."""
    vision = transformers.Gemma4VisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, head_dim=8)
    config = transformers.Gemma4Config(text_config=FAMILIES["gemma4"](), vision_config=vision, audio_config=None)
    family = Family("gemma4_multimodal", make_tiny(tmp_path, config, default_model_dir, seed=5))
    llm = LLM(model=str(family.folder), num_kv_blocks=64, block_size=8)
    assert len(llm.engine.runner.kv_caches) == 2  # 4 layers, the last 2 reading the first 2's caches
    prompts = prompts_of(3, seed=7, lo=3, hi=40)
    assert family.ours(prompts, llm=llm) == family.hf(prompts)


def test_mistral3_multimodal_checkpoint_serves_its_text_model(tmp_path, default_model_dir):
    """A Mistral3ForConditionalGeneration checkpoint (how Ministral 3 ships): its Ministral 3 text model, the
    Pixtral tower left aside and the embeddings tied as the outer config says, gives HF's greedy tokens."""
    vision = transformers.PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                              num_attention_heads=2, head_dim=8)
    config = transformers.Mistral3Config(text_config=FAMILIES["ministral3"](), vision_config=vision,
                                         tie_word_embeddings=False)
    auto = transformers.AutoModelForImageTextToText
    family = Family("mistral3", make_tiny(tmp_path, config, default_model_dir, seed=6, auto=auto), auto=auto)
    prompts = prompts_of(3, seed=8, lo=3, hi=60)
    assert family.ours(prompts, num_kv_blocks=64, block_size=8) == family.hf(prompts)
