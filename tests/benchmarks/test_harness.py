"""The benchmarks' shared harness: the header, percentiles, the table, and `--plot` without matplotlib."""

import sys

import pytest

from benchmarks import harness


def test_header_names_the_cpu_the_kernel_path_and_the_load():
    line = harness.machine_header()
    assert line.startswith("CPU: ") and "flags:" in line
    assert "our kernel path: " in line and "threads" in line and "load average" in line


def test_percentile_interpolates_between_ranks():
    assert harness.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert harness.percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert harness.percentile([], 50) != harness.percentile([], 50)  # NaN


def test_table_widths_alignment_and_rule():
    text = harness.format_table(["name", "n"], [["a", 10], ["long name", 2]], align="lr", rule=True)
    assert text.splitlines() == ["name        n", "---------  --", "a          10", "long name   2"]


def test_plot_without_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without the extra sees: ImportError
    with pytest.raises(SystemExit) as exc:
        harness.pyplot()
    assert "sllm[bench]" in str(exc.value.code)


def test_read_bandwidth_is_bytes_over_the_time_of_a_sum(monkeypatch):
    monkeypatch.setattr(harness, "time_ms", lambda fn, **kw: fn() is not None and 2.0)  # 2 ms a sum
    assert harness.read_bandwidth_gbps(1 << 20) == pytest.approx((1 << 20) / 2e-3 / 1e9)
