"""Engine settings, named after vLLM's where a name exists (`max_num_seqs`, `max_model_len`, ...)."""

from dataclasses import dataclass
from typing import Any, Literal

from engine.matryoshka import check_hf_overrides

Scheduling = Literal["continuous", "static", "dynamic"]
# auto: a GGUF model keeps its quantized blocks on the CPU (fp32 activations), anything else as stored;
# none: GGUF dequantized to float (the HF-exact reference); gguf: the file's blocks, required.
Quantization = Literal["auto", "none", "gguf", "int8"]
# float: quantized weights meet float32 activations (the dequantized reference's result up to rounding);
# int8: activations rounded to int8 (per 32 values, per 256 for K-quant weights) for integer dot products,
# as llama.cpp does (CPU only).
Activations = Literal["float", "int8"]


@dataclass
class EngineConfig:
    model: str = "default"  # "default", an HF folder, or a .gguf file
    served_model_name: str | None = None
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    # The KV cache's element type (vLLM's --kv-cache-dtype; llama.cpp's --cache-type-k/v): auto keeps the
    # activations' dtype. float16/bfloat16 under float32 activations halve the bytes decode attention reads
    # at long contexts and many sequences (CPU kernels; keys and values rounded once when stored).
    kv_cache_dtype: str = "auto"
    quantization: Quantization = "auto"
    activations: Activations = "float"  # process-wide on the CPU kernels (kernels/quantized.py)
    # CPU: the quantized weights copied onto transparent huge pages at load (engine/host_memory.py's
    # on_huge_pages): one decode stream up to 7% faster, the load slower by fresh memory's first touch.
    huge_page_weights: bool = False
    device: str = "auto"
    block_size: int = 16
    num_kv_blocks: int | None = None  # the KV budget in blocks; wins over kv_cache_bytes
    kv_cache_bytes: int | None = None  # the KV budget in bytes; default 1 GiB on CPU, 40% free memory on CUDA
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # default: the model's context, capped at 8192
    enable_prefix_caching: bool = True
    # Prefix caching for hybrid models (engine/state_snapshots.py): a prompt keeps its recurrent state every
    # mamba_block_size tokens (vLLM's name for the spacing of cached Mamba states; rounded up to whole KV blocks),
    # besides its last full blocks, in a pool of max_state_snapshots states (None: what a quarter of the KV
    # cache's bytes holds, 4 to 256).
    mamba_block_size: int = 256
    max_state_snapshots: int | None = None
    enable_chunked_prefill: bool = True
    scheduling: Scheduling = "continuous"
    batch_wait_ms: float = 20.0  # dynamic batching: how long to collect requests before starting a batch
    # Admission balance (TGI's waiting_served_ratio): with running sequences present, new prompts are
    # admitted only once waiting >= ratio * running, or after max_waiting_steps steps. 0 admits at once.
    waiting_served_ratio: float = 0.0
    max_waiting_steps: int = 20
    # Priority (engine/scheduler.py): a request's effective priority improves by 1 for every
    # priority_aging_s seconds since it was queued (waiting or running), so a stream of higher-priority
    # work delays it but never starves it. 0 turns aging off.
    priority_aging_s: float = 10.0
    speculative_config: dict[str, Any] | None = None
    # vLLM's --hf-overrides: config.json keys replaced for this model; sllm reads the Matryoshka ones
    # (engine/matryoshka.py: is_matryoshka, matryoshka_dimensions) and refuses others.
    hf_overrides: dict[str, Any] | None = None
    # Guided decoding (engine/guided.py): a constrained string, array or object whose tokens repeat one
    # cycle this many times is closed (0: off); under tool_choice auto, a logit bias toward opening a
    # tool call at the first generated token (None: 3.0 when the chat template does not render tools,
    # 0 when it does; 0: off).
    guided_loop_repeats: int = 3
    tool_call_bias: float | None = None
    # LoRA adapters (engine/lora.py), as vLLM names them: adapters resident at once, their largest rank,
    # and the ones loaded at startup (name -> PEFT folder).
    enable_lora: bool = False
    max_loras: int = 4
    max_lora_rank: int = 64
    lora_modules: dict[str, str] | None = None
    # Budget-aware closing (engine/json_budget.py): compact JSON output and tool-call arguments are
    # closed (missing required keys filled with minimal values) when the tokens left before max_tokens
    # are just enough, so they parse whenever the budget allows. Requests can opt out
    # (SamplingParams.guided_budget_close); False turns it off for all.
    guided_budget_close: bool = True
    # Chat (engine/chat/options.py), as vLLM's serve flags: a chat template replacing the model's (a path or
    # the Jinja text), the tool-call and reasoning formats (None: read from the template), and the thinking
    # tokens a request may spend before its end is forced (None: no limit unless the request sets one).
    chat_template: str | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    max_thinking_tokens: int | None = None
    # The model card's sampling defaults for fields a request leaves out (engine/generation_config.py), as
    # vLLM's --generation-config: auto (the folder's generation_config.json), vllm (none) or a path.
    generation_config: str = "auto"
    seed: int = 0
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if self.block_size not in (1, 2, 4, 8, 16, 32, 64, 128):
            raise ValueError(f"block_size must be a power of two up to 128, got {self.block_size}")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be at least 1")
        if self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be at least 1")
        if self.mamba_block_size < 1:
            raise ValueError(f"mamba_block_size must be at least 1, got {self.mamba_block_size}")
        if self.max_state_snapshots is not None and self.max_state_snapshots < 1:
            raise ValueError(f"max_state_snapshots must be at least 1 (None: sized by the KV cache), got "
                             f"{self.max_state_snapshots}")
        if self.guided_loop_repeats < 0 or self.guided_loop_repeats == 1:
            raise ValueError(f"guided_loop_repeats must be 0 (off) or at least 2, got {self.guided_loop_repeats}")
        if self.quantization not in ("auto", "none", "gguf", "int8"):
            raise ValueError(f"quantization must be auto, none, gguf or int8, got {self.quantization!r}")
        if self.activations not in ("float", "int8"):
            raise ValueError(f"activations must be float or int8, got {self.activations!r}")
        check_hf_overrides(self.hf_overrides)
        if self.priority_aging_s < 0:
            raise ValueError(f"priority_aging_s must be 0 (off) or positive, got {self.priority_aging_s}")
        if self.max_loras < 1 or self.max_lora_rank < 1:
            raise ValueError("max_loras and max_lora_rank must be at least 1")
        if self.lora_modules and not self.enable_lora:
            raise ValueError("lora_modules needs enable_lora")
        if self.scheduling not in ("continuous", "static", "dynamic"):
            raise ValueError(f"scheduling must be continuous, static or dynamic, got {self.scheduling!r}")
