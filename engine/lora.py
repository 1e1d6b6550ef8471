"""LoRA adapters (PEFT format) served beside one base model, several per batch.

An adapter adds `scale * (x A^T) B^T` to a projection's output. Weights are read once from
`adapter_config.json` + `adapter_model.safetensors` and kept in float32 beside the base weights,
whatever those are (fp32, bf16, GGUF blocks, int8): the base matmul is untouched, the delta is added.
Our fused projections (qkv, gate_up) take one A stacked from the targeted modules' A's and one B that
is block-diagonal, so each projection costs one matmul pair per adapter; each model family says where an HF
module's output rows sit in its projections (`lora_targets`: LoRATarget, or why a module takes no adapter).

Rows of one step carry different adapters (or none): each row adds its own adapter's delta (the Punica /
S-LoRA idea). A step's adapters get slots 0..S-1 and each row its slot (-1: none). On the CPU with the C++
kernels the deltas are computed there (kernels/cpu/csrc/lora_delta.cpp, rows of one adapter grouped, up to
four at a time, through the few-row matmul): inside the one-call decode op for every decode step it takes (8
rows on GGUF blocks, 4 on float32), so adapters keep that path, and by one `lora_add_` call per projection in
the model's layer loop for steps of up to CPU_KERNEL_MAX_ROWS rows. Longer steps (prefill chunks) and other
devices (CUDA, bf16 activations) gather the rows of each adapter, run one matmul pair and scatter-add back, in
torch. A step in which no row has an adapter does no LoRA work at all. Measured by `sllm bench lora`
(benchmarks/lora.py)."""

import json
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from engine.errors import InvalidRequestError, NotFoundError
from kernels.cpu import cpu_kernels_available

PROJECTIONS = ("qkv", "o", "gate_up", "down")  # in the order the C++ decode op takes them
# Rows up to which the C++ `lora_add_` beats the torch grouping (one thread, qkv of the default model, 4
# adapters of rank 8: 16 us against 430 at 4 rows, 140 against 500 at 32, even near 128; at 512 rows the
# grouping's few large GEMMs win, 2.8 ms against 4.6): decode steps take the C++ op, long prefill chunks
# the grouping.
CPU_KERNEL_MAX_ROWS = 128
NO_MATRIX = torch.empty(0)  # a projection an adapter leaves alone, for the C++ ops
KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.([\w.]+?)\.lora_([AB])\.weight$")


@dataclass(frozen=True)
class LoRATarget:
    """Where one HF module's LoRA delta lands: our projection, the module's input width, and for each copy of
    its output inside the projection the projection's row of each output row. Fused projections stack
    modules (q, k, v in qkv), some reorder rows (partial RoPE's rotary permutation, Qwen3.5's per-head query
    and gate split apart), and Gemma 4's keys-as-values layers write k_proj's output twice (keys and values)."""

    projection: str
    in_features: int
    rows: tuple[torch.Tensor, ...]

    @property
    def out_features(self) -> int:
        return self.rows[0].numel()


def stacked(projection: str, in_features: int, modules: list[tuple[str, int]],
            positions: torch.Tensor | None = None) -> dict[str, LoRATarget]:
    """Targets of `modules` (HF name, output width) stacked in order in `projection`; `positions[r]`: the
    projection's row holding row r of the stack, where the model reordered them (else in place)."""
    out, offset = {}, 0
    for name, width in modules:
        rows = torch.arange(offset, offset + width)
        out[name] = LoRATarget(projection, in_features, (rows if positions is None else positions[rows],))
        offset += width
    return out


@dataclass(frozen=True)
class LoRARequest:
    """Which adapter a request uses, named as vLLM's: `lora_name` (what clients send as `model`),
    `lora_int_id` (unique per load: prefix-cache keys use it, so a reloaded name never meets the old
    adapter's KV blocks) and `lora_path` (the PEFT folder)."""

    lora_name: str
    lora_int_id: int
    lora_path: str


@dataclass
class LoRAAdapter:
    request: LoRARequest
    rank: int
    # "model.layers.{i}.{qkv|o|gate_up|down}" -> (A [r_total, in], B [out, r_total] with the scale folded in)
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # A's and B's of every layer's PROJECTIONS in order (NO_MATRIX where not adapted), for the decode op
    decode_a: list[torch.Tensor] = field(default_factory=list)
    decode_b: list[torch.Tensor] = field(default_factory=list)

    def index(self, num_layers: int) -> None:
        pairs = [self.weights.get(f"model.layers.{i}.{p}", (NO_MATRIX, NO_MATRIX))
                 for i in range(num_layers) for p in PROJECTIONS]
        self.decode_a = [a for a, _ in pairs]
        self.decode_b = [b for _, b in pairs]


def _config(folder: Path, max_rank: int) -> tuple[int, float]:
    path = folder / "adapter_config.json"
    if not path.is_file():
        raise InvalidRequestError(f"{folder}: no adapter_config.json (a PEFT LoRA adapter folder is expected)",
                                  "lora_path")
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequestError(f"{folder}: adapter_config.json is not readable JSON: {exc}", "lora_path") from None

    def refuse(why: str) -> InvalidRequestError:
        return InvalidRequestError(f"{folder}: unsupported adapter: {why}", "lora_path")

    if not isinstance(cfg, dict):
        raise refuse(f"adapter_config.json holds a {type(cfg).__name__}, not an object")
    if cfg.get("peft_type", "LORA") != "LORA":
        raise refuse(f"peft_type {cfg.get('peft_type')!r} (only LORA)")
    if cfg.get("use_dora"):
        raise refuse("DoRA (use_dora)")
    if cfg.get("bias", "none") != "none":
        raise refuse(f"bias={cfg.get('bias')!r} (only 'none')")
    if cfg.get("fan_in_fan_out"):
        raise refuse("fan_in_fan_out")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise refuse("per-module rank_pattern / alpha_pattern")
    if cfg.get("modules_to_save"):
        raise refuse(f"modules_to_save {cfg['modules_to_save']}")
    # PEFT's LoraConfig defaults, for a config written without them: r=8, lora_alpha=8
    r, alpha = cfg.get("r", 8), cfg.get("lora_alpha", 8)
    if isinstance(r, bool) or not isinstance(r, int) or isinstance(alpha, bool) or not isinstance(alpha, int | float):
        raise refuse(f"r={r!r} and lora_alpha={alpha!r} must be numbers (r a whole one)")
    if not 0 < r <= max_rank:
        raise InvalidRequestError(f"{folder}: adapter rank {r} is outside 1..max_lora_rank ({max_rank})", "lora_path")
    scale = alpha / (r**0.5 if cfg.get("use_rslora") else r)
    return r, scale


def load_adapter(request: LoRARequest, model, max_rank: int) -> LoRAAdapter:
    """Reads a PEFT adapter for `model` (engine.models.LlamaForCausalLM or a family built on it), placed where
    `model.lora_targets(layer)` says; refuses, with the reason, what it cannot apply exactly."""
    from safetensors.torch import load_file

    folder = Path(request.lora_path)
    rank, scale = _config(folder, max_rank)
    file = folder / "adapter_model.safetensors"
    if not file.is_file():
        raise InvalidRequestError(f"{folder}: no adapter_model.safetensors", "lora_path")
    try:
        tensors = load_file(str(file))
    except Exception as exc:  # safetensors raises its own SafetensorError (and OSError) on a damaged file
        raise InvalidRequestError(f"{folder}: adapter_model.safetensors cannot be read: {exc}", "lora_path") from None
    parts: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        m = KEY.match(key)
        if m is None:
            raise InvalidRequestError(f"{folder}: unsupported adapter weight {key!r} (LoRA on the decoder layers' "
                                      "projections only)", "lora_path")
        layer, module, ab = int(m.group(1)), m.group(2), m.group(3)
        if layer >= model.num_layers:
            raise InvalidRequestError(f"{folder}: layer {layer} does not exist in the base model", "lora_path")
        parts.setdefault((layer, module), {})[ab] = tensor.float()
    if not parts:
        raise InvalidRequestError(f"{folder}: the adapter has no LoRA weights", "lora_path")
    targets = {layer: model.lora_targets(layer) for layer in {layer for layer, _ in parts}}
    for (layer, module), ab in parts.items():
        target = targets[layer].get(module)
        if not isinstance(target, LoRATarget):
            takes = sorted(m for m, t in targets[layer].items() if isinstance(t, LoRATarget))
            why = target or f"this model's layer takes LoRA on {', '.join(takes)}"
            raise InvalidRequestError(f"{folder}: layer {layer} {module} cannot take a LoRA adapter: {why}",
                                      "lora_path")
        if set(ab) != {"A", "B"}:
            raise InvalidRequestError(f"{folder}: layer {layer} {module} lacks lora_A or lora_B", "lora_path")
        a, b = ab["A"], ab["B"]
        if a.shape != (rank, target.in_features) or b.shape != (target.out_features, rank):
            raise InvalidRequestError(
                f"{folder}: layer {layer} {module}: lora_A {list(a.shape)} / lora_B {list(b.shape)} do not fit "
                f"the base model (rank {rank}, {target.in_features} -> {target.out_features})", "lora_path")
    adapter = LoRAAdapter(request, rank)
    for layer, proj in sorted({(layer, targets[layer][module].projection) for layer, module in parts}):
        # One A stacked from the modules' A's, one B holding each module's B (scaled) in its rows and A's columns.
        modules = [m for m, t in targets[layer].items()
                   if isinstance(t, LoRATarget) and t.projection == proj and (layer, m) in parts]
        a_cat = torch.cat([parts[layer, m]["A"] for m in modules])  # [r * k, in]
        b_cat = torch.zeros(model.weights[f"model.layers.{layer}.{proj}"].shape[0], a_cat.shape[0])
        for j, m in enumerate(modules):
            for rows in targets[layer][m].rows:
                b_cat[rows, j * rank : (j + 1) * rank] = parts[layer, m]["B"] * scale
        adapter.weights[f"model.layers.{layer}.{proj}"] = (a_cat.contiguous().to(model.device),
                                                           b_cat.contiguous().to(model.device))
    adapter.index(model.num_layers)
    return adapter


@dataclass
class LoRABatch:
    """The step's adapters (slot i: adapters[i]) and each row's slot (-1: none)."""

    adapters: list[LoRAAdapter]
    row_slots: list[int]
    device: torch.device
    cpu_kernels: bool  # float32 rows take the C++ `lora_add_` (else the torch grouping)

    @cached_property
    def groups(self) -> list[tuple[LoRAAdapter, torch.Tensor]]:
        """(adapter, its row indices) per adapter, for the torch path: built once per step, not per
        projection."""
        rows: list[list[int]] = [[] for _ in self.adapters]
        for row, slot in enumerate(self.row_slots):
            if slot >= 0:
                rows[slot].append(row)
        return [(a, torch.tensor(r, dtype=torch.long, device=self.device)) for a, r in zip(self.adapters, rows,
                                                                                            strict=True)]

    def apply(self, y: torch.Tensor, x: torch.Tensor, name: str) -> torch.Tensor:
        """y (the base projection of x) plus each row's delta."""
        if self.cpu_kernels and y.dtype == x.dtype == torch.float32 and y.shape[0] <= CPU_KERNEL_MAX_ROWS:
            pairs = [a.weights.get(name, (NO_MATRIX, NO_MATRIX)) for a in self.adapters]
            torch.ops.sllm_cpu.lora_add_(y, x, [a for a, _ in pairs], [b for _, b in pairs], self.row_slots)
            return y
        for adapter, rows in self.groups:
            ab = adapter.weights.get(name)
            if ab is None:
                continue
            a, b = ab
            xs = x.index_select(0, rows).float()
            delta = (xs @ a.T) @ b.T
            y.index_add_(0, rows, delta.to(y.dtype))
        return y

    def decode_args(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[int]]:
        """The one-call C++ decode op's lora arguments: A's and B's per layer, projection and slot."""
        n = len(self.adapters[0].decode_a)
        lora_a = [a.decode_a[j] for j in range(n) for a in self.adapters]
        lora_b = [a.decode_b[j] for j in range(n) for a in self.adapters]
        return lora_a, lora_b, self.row_slots


class LoRAManager:
    """Registered adapters (name -> LoRARequest) and the ones resident in memory (at most `max_loras`,
    least recently used evicted first, never one that a live request uses)."""

    def __init__(self, model, max_loras: int, max_lora_rank: int):
        self.model = model
        self.max_loras = max_loras
        self.max_lora_rank = max_lora_rank
        self.registered: dict[str, LoRARequest] = {}
        self.resident: OrderedDict[int, LoRAAdapter] = OrderedDict()
        self.in_use: dict[int, int] = {}  # lora_int_id -> live requests
        # Deltas through the C++ kernels (kernels/cpu/csrc/lora_delta.cpp) on the CPU, else in torch.
        self.cpu_kernels = model.device.type == "cpu" and cpu_kernels_available()
        self._next_id = 1

    def add(self, name: str, path: str) -> LoRARequest:
        """Registers and loads an adapter (its errors surface here, not at its first request)."""
        if name in self.registered:
            raise InvalidRequestError(f"the LoRA adapter {name!r} is already loaded", "lora_name")
        req = LoRARequest(name, self._next_id, str(path))
        adapter = load_adapter(req, self.model, self.max_lora_rank)
        self._next_id += 1
        self._make_room()
        self.resident[req.lora_int_id] = adapter
        self.registered[name] = req
        return req

    def remove(self, name: str) -> None:
        req = self.registered.get(name)
        if req is None:
            raise KeyError(name)
        if self.in_use.get(req.lora_int_id):
            raise InvalidRequestError(f"the LoRA adapter {name!r} has requests in flight; unload it when they end",
                                      "lora_name")
        del self.registered[name]
        self.resident.pop(req.lora_int_id, None)

    def _make_room(self) -> None:
        while len(self.resident) >= self.max_loras:
            idle = next((i for i in self.resident if not self.in_use.get(i)), None)
            if idle is None:
                raise InvalidRequestError(f"all {self.max_loras} resident LoRA adapters (max_loras) have requests in "
                                          "flight; retry when one ends", "model")
            del self.resident[idle]

    def acquire(self, name: str | LoRARequest) -> LoRARequest:
        """Marks one more live request on the adapter, loading it back if it was evicted; a LoRARequest is
        loaded under its name on first sight, as vLLM does."""
        if isinstance(name, LoRARequest):
            known = self.registered.get(name.lora_name)
            if known is None:
                self.add(name.lora_name, name.lora_path)
            elif Path(known.lora_path).resolve() != Path(name.lora_path).resolve():
                # Answering with the loaded adapter's weights would be a silent wrong answer.
                raise InvalidRequestError(f"the LoRA adapter name {name.lora_name!r} is loaded from {known.lora_path}, "
                                          f"not {name.lora_path}; unload it first or use another name", "lora_request")
            name = name.lora_name
        req = self.registered.get(name)
        if req is None:
            raise NotFoundError(f"The model `{name}` does not exist (no LoRA adapter of that name is loaded).",
                                "model", "model_not_found")
        if req.lora_int_id not in self.resident:
            self._make_room()
            self.resident[req.lora_int_id] = load_adapter(req, self.model, self.max_lora_rank)
        self.resident.move_to_end(req.lora_int_id)
        self.in_use[req.lora_int_id] = self.in_use.get(req.lora_int_id, 0) + 1
        return req

    def release(self, req: LoRARequest) -> None:
        left = self.in_use[req.lora_int_id] - 1
        if left:
            self.in_use[req.lora_int_id] = left
        else:
            del self.in_use[req.lora_int_id]

    def batch(self, row_ids: list[int], device: torch.device) -> LoRABatch | None:
        """Slots for the step's adapters by lora_int_id (0: none); None when no row has an adapter."""
        slot_of: dict[int, int] = {}
        slots = [slot_of.setdefault(lid, len(slot_of)) if lid else -1 for lid in row_ids]
        if not slot_of:
            return None
        return LoRABatch([self.resident[lid] for lid in slot_of], slots, device, self.cpu_kernels)
