"""ChatSLLM picks a LoRA adapter by model name: its answer is the engine's answer with that adapter,
and the base model's answer is unchanged beside it."""

from langchain_core.messages import HumanMessage

from engine import LLM, SamplingParams
from engine.loader import resolve_model
from integrations.langchain import ChatSLLM
from integrations.langchain.engines import shutdown_engines
from tests.engine.conftest import make_tiny_llama
from tests.engine.lora_helpers import make_adapter


def test_chat_sllm_selects_adapter_by_model_name(tmp_path):
    base = make_tiny_llama(tmp_path / "base", resolve_model("default"), seed=6)
    adapter = make_adapter(base, tmp_path / "sql", seed=30, r=4)
    config = {"enable_lora": True, "max_lora_rank": 8, "num_kv_blocks": 64, "lora_modules": {"sql": str(adapter)}}
    messages = [HumanMessage("List the users.")]
    offline = LLM(model=str(base), **config)
    prompt = offline.apply_chat_template([{"role": "user", "content": "List the users."}])
    params = SamplingParams(temperature=0, max_tokens=8)
    want = {n: offline.generate(prompt, params, use_tqdm=False, lora_request=n)[0].outputs[0].text
            for n in (None, "sql")}
    assert want[None] != want["sql"]
    try:
        llm = ChatSLLM(model=str(base), base_model=str(base), temperature=0, max_tokens=8, engine_config=config)
        assert llm.invoke(messages).content == want[None]
        lora = llm.invoke(messages, model="sql")
        assert lora.content == want["sql"] and lora.response_metadata["model_name"] == "sql"
        streamed = "".join(c.content for c in ChatSLLM(model="sql", base_model=str(base), temperature=0,
                                                      max_tokens=8, engine_config=config).stream(messages))
        assert streamed == want["sql"]
    finally:
        shutdown_engines()
