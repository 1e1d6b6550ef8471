"""Random PEFT LoRA adapters for tests, made with `peft` itself (non-zero B, so they change the output)."""

from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ALL_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(base: Path, folder: Path, *, seed: int, r: int = 4, alpha: int = 8,
                 modules: list[str] | None = None, std: float = 0.2, **config) -> Path:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=r, lora_alpha=alpha, target_modules=modules or ALL_MODULES,
                                                  lora_dropout=0.0, **config))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(0, std)
    peft_model.save_pretrained(folder)
    return folder


def merged_model(base: Path, adapter: Path):
    from peft import PeftModel

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    return PeftModel.from_pretrained(model, adapter).merge_and_unload().eval()
