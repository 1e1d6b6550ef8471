"""Compiles the C++ CPU kernels in `csrc/` at first use and loads them as `torch.ops.sllm_cpu`.

The library is built with `torch.utils.cpp_extension.load` (g++ and ninja) into
`$SLLM_CACHE_DIR/torch_extensions/<name>` (default `~/.cache/sllm/...`), where the name carries a hash
of the sources, the flags and the torch version: a change to any of them builds a new library, and an
existing one is loaded directly, without ninja. When the build cannot run (no compiler, no ninja) one
warning is logged and the callers keep the torch reference. `SLLM_CPU_KERNELS=0` turns them off;
`SLLM_CPU_ISA` chooses their instruction-set path (`kernels/cpu/isa.py`)."""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

log = logging.getLogger(__name__)

CSRC = Path(__file__).parent / "csrc"
SOURCES = (
    "isa.cpp", "decode_attention.cpp", "decode_task_generic.cpp", "decode_task_avx2.cpp",
    "decode_task_avx512.cpp", "fused_ops.cpp", "small_linear.cpp", "small_linear_generic.cpp",
    "small_linear_avx2.cpp", "small_linear_avx512.cpp", "quantized_linear.cpp", "quantized_linear_generic.cpp",
    "quantized_linear_avx2.cpp", "quantized_linear_avx512.cpp", "quantized_linear_int8.cpp",
    "quantized_linear_int8_avx2.cpp", "quantized_linear_int8_avx512.cpp", "decode_layers.cpp", "lora_delta.cpp",
)
HEADERS = (
    "isa.h", "decode_attention.h", "decode_task_impl.h", "small_linear.h", "quantized_linear.h", "fused_ops.h", "ops.h",
    "vec_avx2.h", "lora_delta.h", "quantized_int8_impl.h", "group_bytes_avx2.h",
    "int8_gemm_impl.h", "int8_gemm_zmm.h", "int8_rows_zmm.h",
)
# No -march: the library may sit in a cache shared with other machines. AVX2 and AVX-512 code is
# confined to the *_avx2.cpp and *_avx512.cpp files (enabled by a pragma there) and chosen at run time
# (isa.cpp). OpenMP must be on for at::parallel_for, whose parallel region is compiled into this
# library from ATen's headers.
CFLAGS = ("-O3", "-fopenmp")
LDFLAGS = ("-fopenmp",)

_lock = threading.Lock()
_state: dict[str, bool] = {}
# Run once the library is in, before any op is called: isa.py registers the SLLM_CPU_ISA ceiling here
# (kernels/cpu/__init__.py imports it first), so the build never imports the path selection built on it.
_on_load: list[Callable[[], None]] = []


def on_load(fn: Callable[[], None]) -> None:
    """Registers `fn` to run right after the library loads (under the loader's lock: it must not call
    `cpu_kernels_available`)."""
    _on_load.append(fn)


def extensions_dir() -> Path:
    # The same root as engine.loader.cache_dir (kernels must not import the engine).
    root = Path(os.environ.get("SLLM_CACHE_DIR") or Path.home() / ".cache" / "sllm")
    return root / "torch_extensions"


def library_name() -> str:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode())
        h.update((CSRC / name).read_bytes())
    h.update(repr((CFLAGS, LDFLAGS, torch.__version__, platform.machine())).encode())
    return f"sllm_cpu_{h.hexdigest()[:16]}"


def cpu_kernels_available() -> bool:
    """True once `torch.ops.sllm_cpu` is loaded; builds it on the first call (tens of seconds)."""
    if "ok" not in _state:
        with _lock:
            if "ok" not in _state:
                _state["ok"] = _load_or_disable()
    return _state["ok"]


def _load_or_disable() -> bool:
    if os.environ.get("SLLM_CPU_KERNELS") == "0":
        log.info("C++ CPU kernels disabled by SLLM_CPU_KERNELS=0; using the torch reference")
        return False
    try:
        _load()
    except Exception as exc:  # noqa: BLE001 - any build failure means: serve with the reference
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("C++ CPU kernels unavailable (%s); using the torch reference attention", first)
        return False
    for fn in _on_load:  # SLLM_CPU_ISA: a path this CPU cannot run is an error, not a silent fallback
        fn()
    return True


def _load() -> None:
    name = library_name()
    build_dir = extensions_dir() / name
    lib = build_dir / f"{name}.so"
    # A `lock` file means another process is building right now: go through load(), which waits on it.
    if lib.exists() and not (build_dir / "lock").exists():
        torch.ops.load_library(str(lib))
        return
    _find_build_tools()
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    log.info("building the C++ CPU kernels into %s (once per source version)", build_dir)
    t0 = time.perf_counter()
    load(
        name=name,
        sources=[str(CSRC / s) for s in SOURCES],
        extra_cflags=list(CFLAGS),
        extra_ldflags=list(LDFLAGS),
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=False,
    )
    log.info("built the C++ CPU kernels in %.1f s", time.perf_counter() - t0)


def _find_build_tools() -> None:
    """cpp_extension runs `ninja` and `$CXX` (default `c++`) from PATH; find both or raise.

    A ninja from the `ninja` PyPI package, or one outside PATH in the usual prefixes, is put on PATH."""
    if shutil.which("ninja") is None:
        candidates = [Path("/usr/bin/ninja"), Path("/usr/local/bin/ninja")]
        try:
            import ninja  # type: ignore[import-not-found]

            candidates.insert(0, Path(ninja.BIN_DIR) / "ninja")
        except ImportError:
            pass
        found = next((c for c in candidates if c.exists()), None)
        if found is None:
            raise RuntimeError("ninja not found (apt install ninja-build, or pip install ninja)")
        os.environ["PATH"] = f"{found.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise RuntimeError(f"C++ compiler {cxx!r} not found (apt install g++)")
