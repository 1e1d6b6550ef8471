"""Owns the model weights and the paged KV cache, and runs one forward pass per engine step."""

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import torch

import kernels
from engine.config import EngineConfig
from engine.host_memory import on_huge_pages, zeros
from engine.loader import ModelSource
from engine.lora import LoRABatch, LoRAManager
from engine.models import AttentionMetadata, model_class
from engine.pooling import pool_rows
from engine.recurrent_state import RecurrentStates
from engine.scheduler import SchedulerOutput
from kernels.cpu import cpu_kernels_available
from kernels.quantized import use_int8_activations

log = logging.getLogger(__name__)

DEFAULT_CPU_KV_BYTES = 1 << 30
# Recurrent-state slots made at load (a real model's state is megabytes per sequence); more as sequences need.
RECURRENT_SLOTS_AT_START = 8


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[name]


@contextlib.contextmanager
def _one_thread(device: torch.device) -> Iterator[None]:
    """Torch on one thread while the weights are prepared on the CPU: their ops (fusing q/k/v and gate/up,
    Q5_0 parts as Q8_0, the RoPE tables) are small copies, and a server loads beside other work (its own
    start-up on the event loop, other processes). An OpenMP team then waits at every barrier for a thread the
    OS put aside: Qwen2.5-0.5B Q4_K_M's weights took 3.6 s of CPU on two threads of a busy 2-core host, 0.25 s
    on one."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class StepInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    logits_indices: torch.Tensor  # rows of the hidden states whose logits are needed
    lora: LoRABatch | None = None  # rows grouped by LoRA adapter; None when no row has one


class ModelRunner:
    def __init__(self, config: EngineConfig, source: ModelSource, max_model_len: int):
        self.config = config
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        self.kv_dtype = self._kv_dtype(config.kv_cache_dtype)
        self.block_size = config.block_size
        with _one_thread(self.device):
            self.model = model_class(source.config)(source.config, self.dtype, self.device, max_model_len)
            self.model.load_weights(source.weights(config.quantization, self.device, self.dtype))
        if config.activations == "int8":
            use_int8_activations(self.device, self.dtype)
        if config.huge_page_weights and self.device.type == "cpu":
            self.model.place_quantized(on_huge_pages)  # the file's pages are then all unread: released below
        source.release_unread(self.model.weights)
        self.loras = (LoRAManager(self.model, config.max_loras, config.max_lora_rank)
                      if config.enable_lora else None)
        self.num_blocks = self._num_blocks()
        m = self.model
        # Head-major storage under the logical [blocks, block_size, Hkv, D] view that the kernels take:
        # each head's context is then contiguous per block, which the CPU gather and GPU tiles both like.
        def layer_cache(kv_heads: int, head_dim: int) -> torch.Tensor:
            shape = (kv_heads, self.num_blocks, self.block_size, head_dim)
            return zeros(shape, self.kv_dtype, self.device).permute(1, 2, 0, 3)

        # One pair per cache the model keeps (engine/models: one per layer, but for Gemma 4's shared ones).
        self.kv_caches = [(layer_cache(h, d), layer_cache(h, d)) for h, d in m.kv_cache_shapes()]
        # Hybrid models' linear-attention layers keep a state per sequence instead (engine/recurrent_state.py).
        shapes = m.recurrent_state_shapes()
        slots = min(config.max_num_seqs, RECURRENT_SLOTS_AT_START)
        self.recurrent = RecurrentStates(shapes, slots, self.dtype, self.device) if shapes else None
        m.states = self.recurrent
        if self.device.type == "cpu":
            # Build (once per machine, tens of seconds) or load the C++ attention now, not in the first step.
            cpu_kernels_available()
        log.info(
            "KV cache: %d blocks of %d tokens (%.0f MiB) on %s, %s",
            self.num_blocks, self.block_size, self.kv_cache_bytes / 2**20, self.device, self.kv_dtype,
        )

    def _kv_dtype(self, name: str) -> torch.dtype:
        if name == "auto":
            return self.dtype
        if name not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"kv_cache_dtype must be auto, float32, float16 or bfloat16, not {name!r}")
        kv = resolve_dtype(name, self.device)
        if kv != self.dtype and self.device.type != "cpu":
            # The Triton kernels read the cache in the activations' dtype.
            raise ValueError(f"kv_cache_dtype {name} differs from the model's {self.dtype} on {self.device}: "
                             "a cache of another type is a CPU option")
        return kv

    @property
    def bytes_per_block(self) -> int:
        return self.model.kv_bytes_per_block(self.block_size, self.kv_dtype)

    @property
    def kv_cache_bytes(self) -> int:
        return self.num_blocks * self.bytes_per_block

    def _num_blocks(self) -> int:
        cfg = self.config
        if cfg.num_kv_blocks:
            return cfg.num_kv_blocks
        budget = cfg.kv_cache_bytes
        if budget is None:
            if self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                budget = int(free * 0.4)
            else:
                budget = DEFAULT_CPU_KV_BYTES
        return max(1, budget // self.bytes_per_block)

    def prepare(self, sched: SchedulerOutput) -> StepInputs:
        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        rope_rows: list[int] = []  # each token's cos/sin row: its position, but for LongRoPE's long rows
        slots: list[int] = []
        starts = [0]
        ctx_lens: list[int] = []
        logits_idx: list[int] = []
        tables = []
        row_loras: list[int] = []
        for item in sched.scheduled:
            seq, n = item.seq, item.num_new_tokens
            start = seq.num_computed_tokens
            tokens = seq.token_ids + seq.spec_tokens
            ids.extend(tokens[start : start + n])
            row_loras.extend([seq.lora_int_id] * n)
            table = seq.block_table
            for p in range(start, start + n):
                positions.append(p)
                slots.append(table[p // bs] * bs + p % bs)
            rope_rows.extend(self.model.rope_positions(positions[-n:], seq.long_rope))
            starts.append(starts[-1] + n)
            ctx_lens.append(start + n)
            tables.append(table)
            if item.samples:
                # the last real token, then one row per draft token being verified
                k = start + n - len(seq)
                logits_idx.extend(range(starts[-1] - 1 - k, starts[-1]))
        all_decode = all(item.num_new_tokens == 1 + len(item.seq.spec_tokens) for item in sched.scheduled)
        if all_decode and len(ids) > len(sched.scheduled):
            # A verify step: each draft row attends as a decode row over its sequence's blocks up to its
            # own position (the step stores every row's keys first), so it takes the decode path, the
            # one-call C++ op on the CPU, instead of the prefill attention and the layer loop.
            tables = [t for t, item in zip(tables, sched.scheduled, strict=True) for _ in range(item.num_new_tokens)]
            ctx_lens = [p + 1 for p in positions]
            starts = list(range(len(ids) + 1))
        width = max(len(t) for t in tables)
        padded = [t + [0] * (width - len(t)) for t in tables]
        dev = self.device
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long, device=dev),
            block_tables=torch.tensor(padded, dtype=torch.int32, device=dev),
            query_start_loc=torch.tensor(starts, dtype=torch.int32, device=dev),
            context_lens=torch.tensor(ctx_lens, dtype=torch.int32, device=dev),
            all_decode=all_decode,
            state_slots=[self.recurrent.slot(item.seq) for item in sched.scheduled] if self.recurrent else None,
        )
        if self.recurrent is not None and self.recurrent.snapshots is not None:  # after the slots: restored first
            meta.state_saves = self.recurrent.snapshots.plan(
                [(item.seq, item.seq.num_computed_tokens, item.num_new_tokens) for item in sched.scheduled])
        return StepInputs(
            input_ids=torch.tensor(ids, dtype=torch.long, device=dev),
            positions=torch.tensor(rope_rows, dtype=torch.long, device=dev),
            meta=meta,
            logits_indices=torch.tensor(logits_idx, dtype=torch.long, device=dev),
            lora=self.loras.batch(row_loras, dev) if self.loras is not None else None,
        )

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput) -> torch.Tensor:
        """Runs the scheduled tokens; returns float32 logits [rows, vocab] on the CPU for sampling."""
        if sched.blocks_to_copy:
            src, dst = zip(*sched.blocks_to_copy, strict=True)
            kernels.copy_blocks(
                self.kv_caches,
                torch.tensor(src, device=self.device),
                torch.tensor(dst, device=self.device),
            )
        inputs = self.prepare(sched)
        hidden = self.model.forward(inputs.input_ids, inputs.positions, inputs.meta, self.kv_caches, inputs.lora)
        if any(item.seq.pooling is not None for item in sched.scheduled):
            pool_rows(sched.scheduled, hidden, self.model.compute_logits)  # embedding requests (engine/pooling.py)
        if inputs.logits_indices.numel() == 0:
            return torch.empty(0, self.model.vocab_size)
        return self.model.compute_logits(hidden[inputs.logits_indices]).cpu()
