"""What a job's nodes used, as their usage files say (written while each node's command runs:
:mod:`ti_slurm.job.usage`): ``ti-slurm top``'s table, and the efficiency summary that ``status`` ends an
ended job's table with (in the spirit of Slurm's ``seff`` and Princeton's ``jobstats``). Pure.
"""

from __future__ import annotations

from ti_slurm.core.usage import UsageRecord

GIB = 1 << 30
IDLE_PERCENT = 10.0  # a resource used less than this on average is named in a warning


class NodeUsage(UsageRecord):
    """One node's usage file, read back, with the label of its node (``<component>-<n>``)."""

    label: str = ""

    @classmethod
    def parse(cls, label: str, text: str | None) -> NodeUsage | None:
        fields = UsageRecord.fields_of(text)
        return None if fields is None else cls(**fields, label=label)

    @property
    def cpu_efficiency(self) -> float:
        """CPU seconds used over CPU seconds held (its CPUs for as long as it ran), in percent."""
        held = max(self.time - self.started, 1e-3) * self.cpus
        return 100.0 * self.cpu_seconds / held

    def gpu_mean(self, index: str) -> float:
        gpu = self.gpus[index]
        return gpu["util_sum"] / gpu["readings"] if gpu.get("readings") else 0.0

    @property
    def busy(self) -> float:
        """How busy the node is now: its GPUs' utilization where it has some, else its CPUs' share."""
        if self.gpus:
            return sum(g.get("util", 0.0) for g in self.gpus.values()) / len(self.gpus)
        return self.cpu_percent / self.cpus


def _gib(size: float) -> str:
    """A size for people: ``3.1 GiB``, ``9 MiB``."""
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size / (1 << 20):.0f} MiB"


def top_table(nodes: list[NodeUsage]) -> str:
    """``ti-slurm top``: a row per node, the idlest one marked."""
    head = f"{'node':<16} {'label':<12} {'CPU %':>7} {'of CPUs':>7} {'memory':>10} {'peak':>10}"
    lines = [f"{head}  GPUs, npuN: NPUs (util, memory)"]
    idlest = min(nodes, key=lambda n: n.busy) if len(nodes) > 1 else None
    for n in nodes:
        gpus = "  ".join(
            f"{i}: {g.get('util', 0):.0f}% {_gib(g.get('mem', 0))}/{_gib(g.get('mem_total', 0))}"
            for i, g in sorted(n.gpus.items())
        )
        mark = "  <- idlest" if n is idlest else ""
        lines.append(
            f"{n.node:<16} {n.label:<12} {n.cpu_percent:>7.0f} {n.cpus:>7} {_gib(n.rss):>10} {_gib(n.peak_rss):>10}"
            f"  {gpus or '-'}{mark}"
        )
    return "\n".join(lines)


def summary_lines(nodes: list[NodeUsage]) -> list[str]:
    """An ended job's efficiency: CPU, peak memory against the request, GPU utilization; and a plain warning
    for each resource that sat mostly idle."""
    if not nodes:
        return []
    nodes = [n for n in nodes if n.samples > 1]  # only the sample at its end: nothing measured while it ran
    if not nodes:
        return ["  efficiency: not measured: the job ended before its first usage sample (5 s after it started)"]
    used = sum(n.cpu_seconds for n in nodes)
    held = sum(max(n.time - n.started, 1e-3) * n.cpus for n in nodes)
    peak = max(nodes, key=lambda n: n.peak_rss)
    line = f"  efficiency: CPU {100 * used / held:.0f}% ({used:.0f} of {held:.0f} CPU-seconds held"
    line += f" on {len(nodes)} node(s))"
    line += f"; memory peak {_gib(peak.peak_rss)} on {peak.node}"
    if peak.mem_request:
        line += f" of {_gib(peak.mem_request)} asked ({100 * peak.peak_rss / peak.mem_request:.0f}%)"
    for kind in ACCELERATORS:
        means = [n.gpu_mean(i) for n in nodes for i in n.gpus if accelerator(i)[0] == kind]
        if means:
            line += f"; {kind} mean {sum(means) / len(means):.0f}% over {len(means)} {kind}(s)"
    lines = [line]
    for n in nodes:
        if n.cpu_efficiency < IDLE_PERCENT and not n.gpus:
            lines.append(
                f"  warning: the CPUs on {n.node} ({n.label}) averaged {n.cpu_efficiency:.0f}% of its {n.cpus}"
            )
        for kind in ACCELERATORS:
            idle = [i for i in n.gpus if accelerator(i)[0] == kind and n.gpu_mean(i) < IDLE_PERCENT]
            if idle:
                mean = sum(n.gpu_mean(i) for i in idle) / len(idle)
                which = _span([accelerator(i)[1] for i in idle])
                lines.append(f"  warning: {kind} {which} on {n.node} averaged {mean:.0f}%")
    return lines


ACCELERATORS = ("GPU", "NPU")


def accelerator(key: str) -> tuple[str, str]:
    """A usage record's accelerator key as (kind, index): ``"3"`` is GPU 3, ``"npu3"`` NPU 3."""
    return ("NPU", key[3:]) if key.startswith("npu") else ("GPU", key)


def _span(indices: list[str]) -> str:
    """``0-7`` for consecutive indices, else ``0,2,5``."""
    numbers = sorted(int(i) for i in indices if i.isdigit())
    if len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"{numbers[0]}-{numbers[-1]}"
    return ",".join(str(i) for i in numbers)
