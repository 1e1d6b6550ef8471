"""Kernel tests run the Triton kernels on the CPU through the interpreter.

TRITON_INTERPRET must be set before `triton` is first imported (it is read when kernels are
decorated), hence at module import time here rather than in a fixture."""

import os

os.environ["TRITON_INTERPRET"] = "1"
