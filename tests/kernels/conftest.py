"""Kernel tests run the Triton kernels on the CPU through the interpreter.

TRITON_INTERPRET must be set before `triton` is first imported (it is read when kernels are
decorated), hence at module import time here rather than in a fixture. This folder is also put on
sys.path so the tests' `kernel_helpers` imports work whatever pytest import mode is configured."""

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
