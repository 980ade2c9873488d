"""What each node's command uses, sampled while it runs: CPU and resident memory over its process tree
(``/proc``), each bound GPU's utilization and memory (NVML through ``nvidia-ml-py`` when it is
installed, else ``nvidia-smi``, less often, else nothing), and each bound Ascend NPU's AI Core use and memory
(``npu-smi info``, as often as ``nvidia-smi``).

:class:`UsageSampler` is ticked by the node's watch (twice a second) and samples every
:data:`SAMPLE_EVERY` seconds; each sample rewrites the node's usage file (``logs/<label>.usage.json``,
kept with the attempt's logs) whole: the latest values (``top``) and what the end summary needs
(CPU seconds, peak memory, GPU utilization summed). Its cost is the command's processes' ``stat`` files,
not the machine's. Readers: :mod:`ti_slurm.follow.usage`.
"""

from __future__ import annotations

import os
import time

from ti_slurm.core.usage import UsageRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing on the job path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

SAMPLE_EVERY = 5.0  # seconds between samples of a node's processes
SERIES_POINTS = 240  # the samples kept for charts: when full, every other one goes (the whole run, coarser)
SMI_EVERY = 30.0  # nvidia-smi is a process of its own: GPUs through it this rarely (NVML: every sample)
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_usage(pids: list[int], proc: str = "/proc") -> tuple[float, int]:
    """CPU seconds (user and system, with the children each process has reaped) and resident bytes of ``pids``."""
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # after the name: state is field 3; utime, stime, cutime, cstime 14-17; rss 24 (in pages)
        cpu += sum(int(x) for x in fields[11:15]) / _TICKS
        rss += int(fields[21]) * _PAGE
    return cpu, rss


def bound_gpus(env: Mapping[str, str]) -> list[str]:
    """The GPUs the node's command may use, as NVML and nvidia-smi index them (``CUDA_VISIBLE_DEVICES``)."""
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return [g for g in visible.split(",") if g.strip().isdigit()] if visible else []


def is_number(text: str) -> bool:
    """A reading as the tools print it: ASCII digits with at most one dot (``²`` is a digit to Python, not to
    ``int``)."""
    return text.isascii() and text.replace(".", "", 1).isdigit()


def parse_smi(text: str) -> dict[str, tuple[float, int, int]]:
    """``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits``:
    index -> (utilization %, memory used and total in bytes)."""
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and all(is_number(p) for p in parts):
            out[parts[0]] = (float(parts[1]), int(float(parts[2])) << 20, int(float(parts[3])) << 20)
    return out


def nvml_reader(indices: list[str]) -> Callable[[], dict[str, tuple[float, int, int]]] | None:
    """GPU readings through NVML (``pynvml``, from ``nvidia-ml-py``), or ``None`` where it is missing."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(int(i)) for i in indices}
    except Exception:
        return None

    def read() -> dict[str, tuple[float, int, int]]:
        out = {}
        for i, handle in handles.items():
            try:
                util, mem = pynvml.nvmlDeviceGetUtilizationRates(handle), pynvml.nvmlDeviceGetMemoryInfo(handle)
                out[i] = (float(util.gpu), int(mem.used), int(mem.total))
            except Exception:
                continue
        return out

    return read


def smi_reader(indices: list[str]) -> Callable[[], dict[str, tuple[float, int, int]]] | None:
    """GPU readings through ``nvidia-smi``, or ``None`` where it is not installed."""
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None

    def read() -> dict[str, tuple[float, int, int]]:
        import subprocess

        query = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
        try:
            res = subprocess.run([smi, *query], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        found = parse_smi(res.stdout.decode(errors="replace"))
        return {i: found[i] for i in indices if i in found}

    return read


def gpu_reader(indices: list[str]) -> tuple[Callable[[], dict[str, tuple[float, int, int]]] | None, float]:
    """How the GPUs ``indices`` are read, and how often: NVML at every sample, else nvidia-smi every
    SMI_EVERY seconds, else not at all."""
    if not indices:
        return None, 0.0
    nvml = nvml_reader(indices)
    return (nvml, SAMPLE_EVERY) if nvml is not None else (smi_reader(indices), SMI_EVERY)


def parse_npu_smi(text: str) -> dict[str, tuple[float, int, int]]:
    """``npu-smi info``'s table (Ascend): NPU id -> (AI Core %, memory used and total in bytes). Each NPU is a
    row with its id and name, then a row per chip whose last cell holds ``AICore(%)`` and ``used / total``
    pairs in MB (``Memory-Usage``, and ``HBM-Usage`` where the chip has HBM: the last pair is taken)."""
    out: dict[str, tuple[float, int, int]] = {}
    npu = ""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0] or not cells[0].split()[0].isdigit():
            continue
        words = cells[2].replace("/", " / ").split()
        if not cells[0].split()[0].isascii():
            continue
        if not npu:  # an NPU's row: its id, its name, health, power, temperature
            npu = cells[0].split()[0]
            continue
        pairs = [(words[k - 1], words[k + 1]) for k, w in enumerate(words) if w == "/" and 0 < k < len(words) - 1]
        numbers = [(u, t) for u, t in pairs if u.isascii() and u.isdigit() and t.isascii() and t.isdigit()]
        if words and is_number(words[0]) and numbers:
            used, total = numbers[-1]
            out[npu] = (float(words[0]), int(used) << 20, int(total) << 20)
        npu = ""
    return out


def bound_npus(env: Mapping[str, str], count: int) -> list[str]:
    """The NPUs the node's command may use (``ASCEND_RT_VISIBLE_DEVICES``, ...; else the first ``count``)."""
    if not count:
        return []
    from ti_slurm.job.ranktable import visible_devices

    ids = visible_devices(env, count)
    return [] if isinstance(ids, str) else [str(i) for i in ids]


def npu_reader(indices: list[str]) -> Callable[[], dict[str, tuple[float, int, int]]] | None:
    """NPU readings through ``npu-smi info``, or ``None`` where it is not installed (or no NPU is bound)."""
    import shutil

    smi = shutil.which("npu-smi")
    if smi is None or not indices:
        return None

    def read() -> dict[str, tuple[float, int, int]]:
        import subprocess

        try:
            res = subprocess.run([smi, "info"], capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        found = parse_npu_smi(res.stdout.decode(errors="replace"))
        return {f"npu{i}": found[i] for i in indices if i in found}

    return read


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class UsageSampler:
    """One node's usage over its command's run, written to ``path`` at each sample."""

    def __init__(
        self, path: str, node: str, cpus: int, mem_request: int, env: Mapping[str, str], npus: int = 0
    ) -> None:
        self.path, self.node, self.cpus, self.mem_request = path, node, cpus, mem_request
        self.started = self.last_time = time.time()
        self.next_sample = time.monotonic() + SAMPLE_EVERY
        self.last_cpu = self.cpu = 0.0
        self.peak_rss = self.samples = 0
        self.gpus: dict[str, dict[str, float]] = {}
        # [seconds since start, CPU %, resident bytes, [each GPU's utilization]] per sample, bounded
        self.series: list[list[Any]] = []
        # each reader of accelerators (GPUs; Ascend NPUs, as "npu<id>") and how often it reads
        read_gpus, gpu_every = gpu_reader(bound_gpus(env))
        read_npus = npu_reader(bound_npus(env, npus))
        readers = [(read_gpus, gpu_every), (read_npus, SMI_EVERY)]
        self.readers = [(read, every) for read, every in readers if read is not None]
        self.next_read = [0.0] * len(self.readers)
        self.children_at_start = _children_cpu()

    def tick(self, pid: int) -> None:
        """Sample when due (``pid``: the command's process, the root of its tree)."""
        if time.monotonic() < self.next_sample:
            return
        self.next_sample = time.monotonic() + SAMPLE_EVERY
        from ti_slurm.job.process import descendants

        self.sample([pid, *descendants(pid)])

    def finish(self) -> None:
        """The command ended: its CPU time as the kernel counted it for this step's reaped children (the
        whole tree, where each process reaped its own), and a last sample."""
        self.cpu = max(self.cpu, _children_cpu() - self.children_at_start)
        self.sample([])

    def sample(self, pids: list[int]) -> None:
        now = time.time()
        cpu, rss = tree_usage(pids)
        self.cpu = max(self.cpu, cpu)  # a child reaped by nobody leaves the tree with its time: never go back
        percent = 100.0 * (self.cpu - self.last_cpu) / max(now - self.last_time, 1e-3)
        self.last_cpu, self.last_time = self.cpu, now
        self.peak_rss, self.samples = max(self.peak_rss, rss), self.samples + 1
        self.read_accelerators()
        if pids:  # a sample while the command ran (the last one, at its end, holds no processes)
            utils = [self.gpus[i].get("util", 0.0) for i in sorted(self.gpus)]
            self.series.append([round(now - self.started, 1), round(percent, 1), rss, utils])
            if len(self.series) > SERIES_POINTS:
                self.series = self.series[::2]
        self.write(now, percent, rss)

    def read_accelerators(self) -> None:
        """Each bound GPU's and NPU's utilization and memory, from the readers that are due."""
        for k, (read, every) in enumerate(self.readers):
            if time.monotonic() < self.next_read[k]:
                continue
            self.next_read[k] = time.monotonic() + every
            try:
                readings = read()
            except Exception:  # a sampler may lose a sample, never the job
                continue
            for index, (util, used, total) in readings.items():
                gpu = self.gpus.setdefault(index, {"util_sum": 0.0, "readings": 0, "peak_mem": 0})
                gpu.update(util=util, mem=used, mem_total=total, peak_mem=max(gpu["peak_mem"], used))
                gpu["util_sum"] += util
                gpu["readings"] += 1

    def record(self, now: float, percent: float, rss: int) -> UsageRecord:
        return UsageRecord(
            node=self.node,
            cpus=self.cpus,
            cpu_percent=round(percent, 1),
            cpu_seconds=round(self.cpu, 2),
            rss=rss,
            peak_rss=self.peak_rss,
            mem_request=self.mem_request,
            started=round(self.started, 3),
            time=round(now, 3),
            gpus={i: dict(g) for i, g in sorted(self.gpus.items())},
            samples=self.samples,
            series=self.series,
        )

    def write(self, now: float, percent: float, rss: int) -> None:
        from ti_slurm.core.files import write_atomic

        try:  # noqa: SIM105 (contextlib is not imported on the job path)
            write_atomic(self.path, self.record(now, percent, rss).to_json() + "\n")
        except OSError:
            pass  # the record of use matters less than the command
