"""LoRA adapters on the newer families give HF PEFT's merged model's greedy tokens, with every projection each
family's HF layers have targeted: Gemma 4 (per-layer head sizes, keys as values with no v_proj, KV-shared
layers with no k/v, wider MLPs, the per-layer-embedding gate and projection), Qwen3.5 (its linear-attention
projections, the full-attention q_proj holding queries and gates, partial RoPE's row order) and Ministral 3.
Rows with the adapter and without share a batch. What cannot take an adapter is refused, named."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import LLM, InvalidRequestError, SamplingParams
from tests.engine.conftest import hf_greedy_with
from tests.engine.lora_helpers import ALL_MODULES, make_adapter, merged_model
from tests.engine.test_hybrid_models import qwen3_5_config
from tests.engine.test_model_families import FAMILIES, make_tiny, prompts_of

MAX_NEW = 10
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_NEW, ignore_eos=True)
CASES = {
    "gemma4": (FAMILIES["gemma4"], ALL_MODULES + ["per_layer_input_gate", "per_layer_projection"]),
    "qwen3_5": (qwen3_5_config, ALL_MODULES + ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]),
    "ministral3": (FAMILIES["ministral3"], ALL_MODULES),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def family(request, tmp_path_factory, default_model_dir):
    config, modules = CASES[request.param]
    root = tmp_path_factory.mktemp(f"lora-{request.param}")
    base = make_tiny(root / "base", config(), default_model_dir, seed=7)
    # Small deltas: these models' logits are flat enough that large ones make every answer one token.
    adapter = make_adapter(base, root / "adapter", seed=12, r=4, alpha=8, modules=modules, std=0.1)
    return request.param, base, adapter


def test_adapter_equals_hf_peft_merged(family):
    name, base, adapter = family
    from transformers import AutoModelForCausalLM

    prompts = prompts_of(3, seed=8, lo=3, hi=40)
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    merged = merged_model(base, adapter)
    want = [hf_greedy_with(merged, p, MAX_NEW) for p in prompts]
    want_plain = [hf_greedy_with(plain, p, MAX_NEW) for p in prompts]
    assert want != want_plain  # the adapter matters
    llm = LLM(model=str(base), enable_lora=True, max_lora_rank=8, num_kv_blocks=128, block_size=8,
              lora_modules={"a": str(adapter)})
    outs = llm.generate(prompts * 2, GREEDY, use_tqdm=False, lora_request=["a"] * len(prompts) + [None] * len(prompts))
    assert [o.outputs[0].token_ids for o in outs] == want + want_plain
    llm.engine.block_manager.check_no_leak()


def _with_module(adapter, folder, module: str, shape_a: tuple[int, int], shape_b: tuple[int, int]):
    """A copy of `adapter` with LoRA weights on one more module (`layers.N.NAME`), as a hand-made adapter has."""
    shutil.copytree(adapter, folder)
    state = load_file(str(folder / "adapter_model.safetensors"))
    prefix = f"base_model.model.model.layers.{module}"
    state[f"{prefix}.lora_A.weight"], state[f"{prefix}.lora_B.weight"] = torch.zeros(shape_a), torch.zeros(shape_b)
    save_file(state, str(folder / "adapter_model.safetensors"))
    return folder


def test_modules_a_family_lacks_are_refused_by_name(family, tmp_path):
    """Qwen3.5's depthwise convolution; Gemma 4's v_proj in a layer whose values are its keys and k_proj in a
    KV-shared layer (HF builds neither, so no PEFT adapter of that checkpoint holds them)."""
    name, base, adapter = family
    cases = {"qwen3_5": [("0.linear_attn.conv1d", "a depthwise convolution, not a projection")],
             "gemma4": [("1.self_attn.v_proj", "this model's layer takes LoRA on mlp.down_proj"),
                        ("2.self_attn.k_proj", "this model's layer takes LoRA on mlp.down_proj")]}.get(name)
    if cases is None:
        pytest.skip("every projection of this family takes an adapter")
    llm = LLM(model=str(base), enable_lora=True, max_lora_rank=8, num_kv_blocks=32)
    for n, (module, why) in enumerate(cases):
        bad = _with_module(adapter, tmp_path / str(n), module, (4, 64), (32, 4))
        layer, part = module.split(".", 1)
        with pytest.raises(InvalidRequestError, match=f"layer {layer} {part} cannot take a LoRA adapter: {why}"):
            llm.engine.add_lora(f"bad{n}", str(bad))
    assert not llm.engine.list_loras()


def test_qwen3_5_linear_attention_on_a_gguf_file_is_refused(family, tmp_path):
    """llama.cpp's converter tiles the value heads by key head; an adapter trained on HF's order is refused
    there rather than applied to the wrong heads."""
    name, base, adapter = family
    if name != "qwen3_5":
        pytest.skip("Qwen3.5 only")
    from tests.engine.test_hybrid_models import _with_mtp_block  # the converter wants Qwen3.5's MTP block
    from tests.gguf_files import llama_cpp_gguf

    path = llama_cpp_gguf(_with_mtp_block(base, tmp_path / "mtp"), tmp_path / "qwen3_5.f32.gguf", "f32")
    llm = LLM(model=str(path), enable_lora=True, max_lora_rank=8, num_kv_blocks=32)
    with pytest.raises(InvalidRequestError, match="linear_attn.in_proj_.* cannot take a LoRA adapter: this GGUF file "
                                                  "holds the value heads tiled"):
        llm.engine.add_lora("a", str(adapter))
