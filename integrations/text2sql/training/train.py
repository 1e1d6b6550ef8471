"""LoRA training of a text-to-SQL adapter with ``peft``: prompt in the seed format, loss on the SQL only.

Built to train on a small shared CPU, where a step costs seconds:

* several questions of one schema are packed into one sequence: their shared prompt prefix (instruction
  and DDL) once, then each question's own tokens and SQL, masked so that each answer sees exactly its
  own prompt (:class:`Encoded`), so the long DDL is read once for many answers;
* LoRA sits on the last ``layers`` decoder layers only, so backpropagation stops there;
* the output head runs only at the positions that carry a label (a few dozen of hundreds).

The base is an HF ``LlamaForCausalLM`` folder (``default`` is the embedded default model, its GGUF
dequantized to float32 by ``engine.loader``, the same weights the engine serves). Training runs in
float32 on the CPU, or under bfloat16 autocast on CUDA when one is present (``precision``: bfloat16 on
the CPU took 0.7x the time of a float32 step on a 2-core EPYC with AVX512-BF16, but was slower on a Xeon
that has the same flag, so it is asked for, never assumed); the seed fixes the data
order, the LoRA init and dropout, so one command gives one adapter on one kind of host. The adapter is saved in float16
(PEFT format, a few MB); the engine reads it back in float32.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from integrations.text2sql.adapter import STYLE_FILE

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TERMINATOR = ";"  # what the grammar and the stop strings end a query with
DEFAULT_BASE_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what ``default`` is, for adapter_config.json
PRECISIONS = ("auto", "fp32", "bf16")


@dataclass
class TrainConfig:
    base: str = "default"
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.05
    lr: float = 5e-4
    epochs: float = 1.0
    batch_size: int = 8
    max_steps: int | None = None
    max_minutes: float | None = None  # a time budget: the schedule follows the elapsed share of it (GPU leases)
    warmup: float = 0.05  # fraction of the steps spent warming up (linear), before the cosine decay
    max_len: int = 1024
    seed: int = 0
    device: str = "auto"  # auto: cuda when available, else cpu
    pack: int = 8  # questions of one schema per training sequence
    layers: int | None = 12  # LoRA on the last N decoder layers (None: all)
    save_every: int = 0  # also write the adapter to OUT/step-N every N steps (0: only at the end)
    save_every_minutes: float = 0.0  # likewise every so many minutes of training (0: never)
    init: str | None = None  # continue training this PEFT adapter (its rank, alpha, layers and targets win)
    extend_layers: bool = False  # with init: LoRA also on the layers of ``layers`` it lacks, starting at zero
    precision: str = "auto"  # auto (bfloat16 autocast on CUDA, float32 on the CPU), fp32 or bf16
    value_hints: bool = False  # the prompts carry the question's stored values (train_data sets them)
    target_modules: tuple[str, ...] = TARGET_MODULES


@dataclass
class TrainResult:
    steps: int
    sequences: int
    seconds: float
    losses: list[float] = field(default_factory=list)
    device: str = "cpu"
    too_long: int = 0  # packed sequences left out: longer than max_len


def resolve_base(base: str) -> Path:
    if base == "default":
        from engine.loader import resolve_model

        return resolve_model("default")
    return Path(base)


def pack_examples(examples: Sequence, pack: int) -> list[list]:
    """Training sequences: per schema, ``pack`` questions at a time (see :func:`encode`)."""
    by_schema: dict[str, list] = {}
    for ex in examples:
        by_schema.setdefault(ex.schema, []).append(ex)
    return [group[i:i + pack] for group in by_schema.values() for i in range(0, len(group), pack)]


def _answer(sql: str) -> str:
    return sql.strip().rstrip(";") + TERMINATOR


@dataclass
class Encoded:
    """One packed sequence: the prompt tokens all its questions share (instruction and DDL), then one
    segment per question (the rest of its prompt, its SQL, EOS). A segment sees the shared prefix and
    itself only, at the positions it would have alone, so every answer is learnt in exactly the context
    the evaluation gives it, while the long DDL is run once for many answers."""

    ids: list[int]
    labels: list[int]  # -100 where the loss does not look
    positions: list[int]
    segments: list[int]  # 0: the shared prefix; k: the k-th question


def encode(tokenizer, pack: Sequence, max_len: int) -> Encoded | None:
    """Each prompt tokenized whole, as the engine tokenizes it, and its SQL alone, as the engine then
    generates it; None when the sequence would exceed ``max_len``."""
    return encode_all(tokenizer, [pack], max_len)[0]


def encode_all(tokenizer, packs: Sequence[Sequence], max_len: int) -> list[Encoded | None]:
    """:func:`encode` over many packs, the texts tokenized in large batches (the fast tokenizer spreads a
    batch over the cores: a GPU lease should not wait minutes on one core)."""
    prompts = _tokenize(tokenizer, [ex.prompt() for pack in packs for ex in pack])
    answers = _tokenize(tokenizer, [_answer(ex.sql) for pack in packs for ex in pack])
    out, i = [], 0
    for pack in packs:
        out.append(_assemble(prompts[i:i + len(pack)], answers[i:i + len(pack)], tokenizer.eos_token_id, max_len))
        i += len(pack)
    return out


def _tokenize(tokenizer, texts: list[str], chunk: int = 4096) -> list[list[int]]:
    ids: list[list[int]] = []
    for start in range(0, len(texts), chunk):
        ids += tokenizer(texts[start:start + chunk], add_special_tokens=False).input_ids
    return ids


def _assemble(prompts: list[list[int]], answers: list[list[int]], eos: int, max_len: int) -> Encoded | None:
    shared = len(os.path.commonprefix(prompts))  # works on token lists too
    shared = min(shared, min(len(p) for p in prompts) - 1)  # every segment keeps a prompt token of its own
    out = Encoded(prompts[0][:shared], [-100] * shared, list(range(shared)), [0] * shared)
    for k, (prompt, sql) in enumerate(zip(prompts, answers, strict=True), start=1):
        answer = sql + [eos]
        tail = prompt[shared:]
        out.ids += tail + answer
        out.labels += [-100] * len(tail) + answer
        out.positions += list(range(shared, shared + len(tail) + len(answer)))
        out.segments += [k] * (len(tail) + len(answer))
    return out if len(out.ids) <= max_len else None


def _loss(model, ids, labels, positions, segments):
    """Next-token cross-entropy with the output head applied at labelled positions only. One sequence at
    a time goes through :mod:`.packed_attention` when the model was set to it; a padded batch through a
    dense mask."""
    import torch.nn.functional as F

    from integrations.text2sql.training.packed_attention import NAME, PackedLayout

    inner = model.get_base_model()
    if ids.shape[0] == 1 and inner.config._attn_implementation == NAME:
        layout = PackedLayout.of(segments[0].cpu()).to(ids.device)  # once a step, not once a layer
        out = inner.model(input_ids=ids, position_ids=positions, packed_layout=layout)
    else:
        out = inner.model(input_ids=ids, attention_mask=attention_mask(segments), position_ids=positions)
    hidden = out.last_hidden_state
    target = labels[:, 1:]
    keep = target != -100
    logits = inner.lm_head(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), target[keep])


def attention_mask(segments):
    """Boolean (batch, 1, T, T): causal, and a segment sees the shared prefix (0) and itself; no row sees
    padding (-1) but its own, so no row of the softmax is empty."""
    import torch

    q, k = segments[:, :, None], segments[:, None, :]
    n, device = segments.shape[1], segments.device
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    allowed = causal & (k >= 0) & ((k == 0) | (k == q))
    return (allowed | torch.eye(n, dtype=torch.bool, device=device))[:, None]


def _batches(encoded: list[Encoded], batch_size: int, rng: random.Random, pad_id: int):
    """Shuffled batches of similar length (less padding), right-padded."""
    import torch

    order = sorted(range(len(encoded)), key=lambda i: (len(encoded[i].ids), rng.random()))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(chunks)
    for chunk in chunks:
        width = max(len(encoded[i].ids) for i in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        positions = torch.zeros((len(chunk), width), dtype=torch.long)
        segments = torch.full((len(chunk), width), -1, dtype=torch.long)
        for row, i in enumerate(chunk):
            e = encoded[i]
            n = len(e.ids)
            ids[row, :n] = torch.tensor(e.ids)
            labels[row, :n] = torch.tensor(e.labels)
            positions[row, :n] = torch.tensor(e.positions)
            segments[row, :n] = torch.tensor(e.segments)
        yield ids, labels, positions, segments


def train(sequences: Sequence[Sequence], out: Path, cfg: TrainConfig,
          progress: Callable[[int, int, float], None] | None = None, show_bar: bool = True) -> TrainResult:
    """Trains a LoRA adapter on packed sequences (:func:`pack_examples`) and writes it to ``out`` (PEFT format)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from tqdm.auto import tqdm
    from transformers import AutoTokenizer, LlamaForCausalLM

    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    device = torch.device("cuda" if cfg.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if cfg.device == "auto" else cfg.device))
    folder = resolve_base(cfg.base)
    tok = AutoTokenizer.from_pretrained(folder)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    all_encoded = encode_all(tok, sequences, cfg.max_len)
    encoded = [e for e in all_encoded if e is not None]
    if not encoded:
        raise ValueError("no training example fits max_len")
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    model.config.use_cache = False
    if cfg.batch_size == 1:  # one packed sequence a step: attention over what its mask keeps only
        from integrations.text2sql.training import packed_attention

        packed_attention.register()
        model.set_attn_implementation(packed_attention.NAME)
    n_layers = model.config.num_hidden_layers
    layers = list(range(max(0, n_layers - cfg.layers), n_layers)) if cfg.layers else None
    if cfg.init and cfg.extend_layers:
        model = _extended(model, cfg.init, layers or list(range(n_layers)), cfg.seed)
    elif cfg.init:
        # PEFT reads the float16 file back in the base's float32, so training goes on in float32.
        model = PeftModel.from_pretrained(model, cfg.init, is_trainable=True)
    else:
        lora = LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout, bias="none",
                          target_modules=list(cfg.target_modules), layers_to_transform=layers,
                          task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    per_epoch = math.ceil(len(encoded) / cfg.batch_size)
    budget = cfg.max_minutes * 60 if cfg.max_minutes else None
    # With a time budget the step count is unknown up front: max_steps (if any) only caps it.
    total = cfg.max_steps or (None if budget else max(1, math.ceil(per_epoch * cfg.epochs)))
    warm = max(1, round(cfg.warmup * total)) if total else 1

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to a tenth
        return (step + 1) / warm if step < warm else _decay((step - warm) / max(1, total - warm))

    sched = None if budget else torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    rng = random.Random(cfg.seed)
    result = TrainResult(0, len(encoded), 0.0, device=device.type, too_long=len(all_encoded) - len(encoded))
    start = time.perf_counter()
    model.train()
    bar = tqdm(total=total, desc="train", unit="step", disable=not show_bar)
    autocast = _autocast(cfg.precision, device)
    saved_at = 0  # the last time checkpoint, in units of save_every_minutes
    while not _done(result.steps, total, budget, time.perf_counter() - start):
        for batch in _batches(encoded, cfg.batch_size, rng, pad_id):
            batch = [t.to(device) for t in batch]
            if budget:
                for group in opt.param_groups:
                    group["lr"] = cfg.lr * lr_share((time.perf_counter() - start) / budget, cfg.warmup)
            if autocast is not None:
                with autocast:
                    loss = _loss(model, *batch)
            else:
                loss = _loss(model, *batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if sched:
                sched.step()
            opt.zero_grad(set_to_none=True)
            result.steps += 1
            result.losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{result.losses[-1]:.3f}")
            if progress:
                progress(result.steps, total or 0, result.losses[-1])
            elapsed = time.perf_counter() - start
            done = _done(result.steps, total, budget, elapsed)
            due = int(elapsed / (cfg.save_every_minutes * 60)) if cfg.save_every_minutes else 0
            if not done and ((cfg.save_every and result.steps % cfg.save_every == 0) or due > saved_at):
                saved_at = max(saved_at, due)
                result.seconds = elapsed
                save(model, out / f"step-{result.steps}", cfg, result)
            if done:
                break
    bar.close()
    result.seconds = time.perf_counter() - start
    save(model, out, cfg, result)
    return result


def _done(steps: int, total: int | None, budget: float | None, elapsed: float) -> bool:
    return (total is not None and steps >= total) or (budget is not None and elapsed >= budget)


def lr_share(progress: float, warmup: float) -> float:
    """The learning rate's share of its peak when ``progress`` (0..1) of a time budget is spent: the step
    schedule's shape (linear warm-up, cosine decay to a tenth) over time instead of steps."""
    if progress < warmup:
        return max(progress / warmup, 0.01)
    return _decay(min(1.0, (progress - warmup) / max(1e-9, 1 - warmup)))


def _decay(done: float) -> float:
    """Cosine from the peak (1) to a tenth as ``done`` goes from 0 to 1."""
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done))


def _autocast(precision: str, device):
    """The bfloat16 autocast context ``precision`` asks for on ``device``, or None for float32."""
    import torch

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be auto, fp32 or bf16, not {precision!r}")
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return None


def _extended(model, init: str, layers: Sequence[int], seed: int):
    """A PEFT model with LoRA on ``layers`` and the init's layers, in the init's rank, alpha and targets:
    the init's weights where it has them; elsewhere B starts at zero, so step 0 is the init's model."""
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    old = LoraConfig.from_pretrained(init)
    n_layers = model.config.num_hidden_layers
    wanted = sorted(set(layers) | set(old.layers_to_transform or range(n_layers)))
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(
        r=old.r, lora_alpha=old.lora_alpha, lora_dropout=old.lora_dropout, bias="none",
        target_modules=sorted(old.target_modules), layers_to_transform=wanted, task_type="CAUSAL_LM"))
    weights = {k: v.float() for k, v in load_file(str(Path(init) / "adapter_model.safetensors")).items()}
    loaded = set_peft_model_state_dict(model, weights)
    if loaded.unexpected_keys:
        raise ValueError(f"{init}: weights the extended adapter has no place for: {loaded.unexpected_keys[:3]}")
    return model


def save(model, out: Path, cfg: TrainConfig, result: TrainResult) -> None:
    """The PEFT adapter in float16 (half the size; the engine and PEFT read it back in float32)."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    if cfg.base == "default":  # the converted model's cache path means nothing on another machine
        config_file = out / "adapter_config.json"
        adapter_config = json.loads(config_file.read_text())
        adapter_config["base_model_name_or_path"] = DEFAULT_BASE_NAME
        config_file.write_text(json.dumps(adapter_config, indent=2) + "\n")
    file = out / "adapter_model.safetensors"
    save_file({k: v.half().contiguous() for k, v in load_file(str(file)).items()}, str(file),
              metadata={"format": "pt"})
    meta = {"config": {**asdict(cfg), "target_modules": list(cfg.target_modules)}, "steps": result.steps,
            "sequences": result.sequences, "too_long": result.too_long, "seconds": round(result.seconds, 1),
            "device": result.device,
            "final_loss": round(sum(result.losses[-20:]) / max(1, len(result.losses[-20:])), 4),
            "losses": [round(x, 4) for x in result.losses]}  # the curve, for a run whose log is gone
    (out / "training.json").write_text(json.dumps(meta, indent=2) + "\n")
    # The generated golds name columns by table and join on declared keys (train_data), so the adapter is
    # asked under a grammar that allows only that, and with value hints when it learnt from them.
    style = {"grammar": {"table_aliases": False, "foreign_key_joins": True},
             "prompt": {"value_hints": cfg.value_hints}}
    (out / STYLE_FILE).write_text(json.dumps(style, indent=2) + "\n")


def plot_losses(losses: Sequence[float], path: Path) -> bool:
    """A loss curve (raw and smoothed) as PNG; False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    k = max(1, len(losses) // 50)
    smooth = [sum(losses[max(0, i - k + 1):i + 1]) / len(losses[max(0, i - k + 1):i + 1]) for i in range(len(losses))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(losses, alpha=0.3, label="loss")
    ax.plot(smooth, label=f"mean of {k}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (SQL tokens)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
