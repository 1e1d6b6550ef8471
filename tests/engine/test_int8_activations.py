"""`--activations int8` (EngineConfig.activations): llama.cpp's numerics as a serving mode. A Q8_0 GGUF file
served with it switches the CPU kernels to int8 activations for the process (kernels/quantized.py
`use_int8_activations`), its log-probabilities stay within the activations' rounding of the float run's
without equalling them, and a setting where it cannot run is refused."""

import gguf
import pytest
import torch
import transformers

from engine import LLM, SamplingParams
from kernels.cpu import cpu_kernels_available
from kernels.cpu.isa import resolve
from tests.engine.test_model_families import TINY, make_tiny, prompts_of
from tests.gguf_files import write_model_gguf

pytestmark = pytest.mark.skipif(not cpu_kernels_available() or resolve(32) == "generic",
                                reason="int8 activations need the C++ kernels' AVX2 or AVX-512 path")


@pytest.fixture
def q8_file(tmp_path, default_model_dir):
    folder = make_tiny(tmp_path / "hf", transformers.LlamaConfig(**TINY), default_model_dir, seed=5)
    yield write_model_gguf(folder, tmp_path / "q8.gguf", qtype=gguf.GGMLQuantizationType.Q8_0)
    torch.ops.sllm_cpu.set_int8_activations(False)  # process-wide: the next test gets float activations


def _first_logprobs(llm: LLM, prompts: list[list[int]]) -> list[dict[int, float]]:
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=5)
    outs = llm.generate(prompts, params, use_tqdm=False)
    llm.engine.block_manager.check_no_leak()
    return [{lp.token_id: lp.logprob for lp in o.outputs[0].logprobs[0].top} for o in outs]


def test_int8_activations_serve_a_gguf_file_within_their_rounding(q8_file):
    prompts = prompts_of(4, seed=3, lo=5, hi=30)
    floats = _first_logprobs(LLM(model=str(q8_file), num_kv_blocks=64), prompts)
    assert not torch.ops.sllm_cpu.int8_activations()
    llm = LLM(model=str(q8_file), num_kv_blocks=64, activations="int8")
    assert torch.ops.sllm_cpu.int8_activations()
    ints = _first_logprobs(llm, prompts)
    diff = torch.tensor([i[t] - f[t] for i, f in zip(ints, floats, strict=True) for t in i.keys() & f.keys()])
    print(f"int8 against float activations: {len(diff)} shared top-5 first-token logprobs differ by at most "
          f"{diff.abs().max():.4f}")
    assert len(diff) >= 3 * len(prompts)  # mostly the same candidates
    assert 0 < diff.abs().max() < 0.3  # the rounding of a tiny random model's activations, never exact


def test_int8_activations_refused_where_they_cannot_run(q8_file):
    with pytest.raises(ValueError, match="activations int8"):
        LLM(model=str(q8_file), num_kv_blocks=64, activations="int8", dtype="bfloat16")
    with pytest.raises(ValueError, match="activations must be float or int8"):
        LLM(model=str(q8_file), activations="int4")
