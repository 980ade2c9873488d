"""Resource use: the sampler's readings (the process tree from /proc, GPUs from recorded NVML and nvidia-smi
answers), and what top and the end summary make of the usage files."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import pytest

from ti_slurm.follow.usage import NodeUsage, summary_lines, top_table
from ti_slurm.job.usage import UsageSampler, gpu_reader, parse_smi, tree_usage
from ti_slurm.slurm.text import mem_bytes

SMI = "0, 87, 40960, 81920\n1, 3, 1024, 81920\n"  # nvidia-smi --query-gpu=index,utilization.gpu,memory.used,...


def test_the_tree_of_a_process_counts_its_cpu_and_memory() -> None:
    cpu, rss = tree_usage([os.getpid()])
    assert cpu > 0 and rss > 10 << 20  # this interpreter: some CPU time, tens of MiB resident
    assert tree_usage([2**22 + 7]) == (0.0, 0)  # a process gone meanwhile counts nothing


def test_gpus_are_read_from_nvidia_smi_and_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_smi(SMI) == {"0": (87.0, 40960 << 20, 81920 << 20), "1": (3.0, 1024 << 20, 81920 << 20)}
    assert parse_smi("[N/A], [N/A]\nNo devices were found\n") == {}
    handles = {0: "h0", 1: "h1"}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=handles.__getitem__,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu={"h0": 91, "h1": 2}[h], memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=5 << 30, total=80 << 30, free=75 << 30),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    read, every = gpu_reader(["0", "1"])
    assert (
        read is not None and every == 5.0 and read() == {"0": (91.0, 5 << 30, 80 << 30), "1": (2.0, 5 << 30, 80 << 30)}
    )
    assert gpu_reader([]) == (None, 0.0)


def test_a_sampler_writes_what_top_and_the_summary_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML: nvidia-smi, as recorded
    monkeypatch.setattr("ti_slurm.job.usage.smi_reader", lambda indices: lambda: parse_smi(SMI))
    path = tmp_path / "ddp-0.usage.json"
    sampler = UsageSampler(str(path), "node03", 8, mem_bytes("4G"), {"CUDA_VISIBLE_DEVICES": "0,1"})
    sampler.sample([os.getpid()])
    sampler.finish()
    data = json.loads(path.read_text())
    assert (data["node"], data["cpus"], data["mem_request"], data["samples"]) == ("node03", 8, 4 << 30, 2)
    assert data["gpus"]["0"]["util"] == 87 and data["gpus"]["1"]["peak_mem"] == 1024 << 20
    usage = NodeUsage.parse("ddp-0", path.read_text())
    assert usage is not None and usage.gpu_mean("1") == 3.0
    lines = summary_lines([usage])
    assert "GPU mean 45% over 2 GPU(s)" in lines[0] and "of 4.0 GiB asked" in lines[0]
    assert lines[1:] == ["  warning: GPU 1 on node03 averaged 3%"]


def usage(label: str, node: str, cpus: int, cpu_seconds: float, gpus: dict | None = None) -> NodeUsage:
    percent = 100.0 * cpu_seconds / 100
    return NodeUsage(node, cpus, percent, cpu_seconds, 1 << 30, 2 << 30, 4 << 30, 0.0, 100.0, gpus or {}, label=label)


def test_the_summary_tells_a_busy_node_from_an_idle_one_and_top_marks_the_idlest() -> None:
    busy, idle = usage("ddp-0", "node01", 1, 98.0), usage("ddp-1", "node02", 1, 2.0)
    lines = summary_lines([busy, idle])
    assert lines[0].startswith("  efficiency: CPU 50% (100 of 200 CPU-seconds held on 2 node(s)); memory peak 2.0 GiB")
    assert lines[1:] == ["  warning: the CPUs on node02 (ddp-1) averaged 2% of its 1"]
    table = top_table([busy, idle]).splitlines()
    assert table[1].split()[:3] == ["node01", "ddp-0", "98"] and not table[1].endswith("idlest")
    assert table[2].endswith("<- idlest")
    eight = {str(i): {"util": 4.0, "util_sum": 40.0, "readings": 10, "mem": 0, "mem_total": 0} for i in range(8)}
    gpu_node = usage("ddp-0", "node03", 8, 700.0, eight)
    assert summary_lines([gpu_node])[1:] == ["  warning: GPU 0-7 on node03 averaged 4%"]


@pytest.mark.parametrize("text,size", [("4096", 4096 << 20), ("500M", 500 << 20), ("4G", 4 << 30), ("", 0), ("x", 0)])
def test_slurm_memory_sizes(text: str, size: int) -> None:
    assert mem_bytes(text) == size


# `npu-smi info` as Huawei's docs print it: an Atlas 200I A2 (AI Core and memory), and 910B-style rows (HBM too)
NPU_SMI = """\
+--------------------------------------------------------------------------------------------------------+
| npu-smi 25.2.0                                       Version: 25.2.0                                   |
+-------------------------------+-----------------+------------------------------------------------------+
| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |
| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |
+===============================+=================+======================================================+
| 0       xxx                   | OK              | 10.4          66                15    / 15           |
| 0       0                     | NA              | 0            957   / 10810                           |
+===============================+=================+======================================================+
"""
NPU_SMI_HBM = """\
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 4     910B3               | OK            | 95.6        40                0    / 0             |
| 0                         | 0000:81:00.0  | 87          0    / 0          41250/ 65536         |
+===========================+===============+====================================================+
| 5     910B3               | OK            | 92.0        39                0    / 0             |
| 0                         | 0000:82:00.0  | 2           0    / 0          3397 / 65536         |
+===========================+===============+====================================================+
"""


def test_ascend_npus_are_read_from_npu_smi_and_summed_up_as_npus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ti_slurm.job.usage import parse_npu_smi

    assert parse_npu_smi(NPU_SMI) == {"0": (0.0, 957 << 20, 10810 << 20)}
    assert parse_npu_smi(NPU_SMI_HBM) == {"4": (87.0, 41250 << 20, 65536 << 20), "5": (2.0, 3397 << 20, 65536 << 20)}
    assert parse_npu_smi("No NPU device found\n") == {}
    smi = tmp_path / "bin" / "npu-smi"  # the node's npu-smi, as the driver installs it
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{NPU_SMI_HBM}EOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    path = tmp_path / "worker-0.usage.json"
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}
    sampler = UsageSampler(str(path), "npu07", 16, 0, env, npus=2)
    sampler.sample([os.getpid()])
    sampler.finish()
    data = json.loads(path.read_text())
    assert data["gpus"]["npu4"]["util"] == 87 and data["gpus"]["npu5"]["mem_total"] == 65536 << 20
    usage = NodeUsage.parse("worker-0", path.read_text())
    assert usage is not None
    lines = summary_lines([usage])
    assert "NPU mean 44% over 2 NPU(s)" in lines[0] and "GPU" not in lines[0]
    assert lines[1:] == ["  warning: NPU 5 on npu07 averaged 2%"]
    assert "npu4: 87% 40.3 GiB/64.0 GiB" in top_table([usage])
    assert UsageSampler(str(path), "n", 1, 0, {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}).readers == []  # no NPUs asked


@pytest.mark.parametrize(
    "output",
    [
        b"| 4     910B  | OK | 93.1 44 \xff\xfe |\n| 0 | 0000:82:00.0 | 87 0 / 0 41250 / 65536 |\n",  # not UTF-8
        "| 4     910B  | OK | 93.1 44 |\n| 0 | 0000:82:00.0 | 8\u00b2 0 / 0 4\u00b2 / 65536 |\n".encode(),  # a ²
        "4, 8\u00b2, 1024, 2048\n0, 50, 1024, \xff\n".encode("latin-1"),  # nvidia-smi's CSV, damaged
    ],
)
def test_a_usage_tool_printing_garbage_loses_a_sample_never_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: bytes
) -> None:
    """``npu-smi`` or ``nvidia-smi`` output that is not UTF-8, or holds a ``²`` (a digit to Python, not to
    ``int``): the sampler goes on and writes its record; the node's command (and the training) goes on."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "out").write_bytes(output)
    for tool in ("npu-smi", "nvidia-smi"):
        (bin_dir / tool).write_text(f"#!/bin/sh\ncat {bin_dir / 'out'}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    path = tmp_path / "worker-0.usage.json"
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4", "CUDA_VISIBLE_DEVICES": "4"}
    sampler = UsageSampler(str(path), "npu07", 16, 1, env, npus=1)
    assert len(sampler.readers) == 2
    sampler.sample([os.getpid()])
    sampler.finish()
    data = json.loads(path.read_text())
    assert data["samples"] == 2 and data["node"] == "npu07"  # what could be read is kept, the rest lost
