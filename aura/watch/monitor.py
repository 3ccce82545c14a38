"""``aura monitor``: live CPU, RAM and GPU usage, one sample every ``--interval`` seconds.

Human output keeps the original guide's format (Spanish shown; English with ``--lang en``)::

    [2024-05-21 22:13:04] CPU: 68.5% | RAM: 72.1% (47.9 GB / 66.4 GB) | RAM proceso: 2.3 GB
      - GPU 0 (NVIDIA RTX 4090) | Utilización: 89% | Memoria: 12.1 GB / 24.0 GB | Temp: 65°C | Potencia: 320 W / 450 W

"GB" are binary gigabytes (2**30 bytes), as ``nvidia-smi`` and the original script reported them.

Training process: ``--pid PID`` follows that process and its children. Without it, every running
process whose command line is an Aura training command (``aura pretrain``/``aura finetune``,
``python -m aura pretrain ...``, torchrun launching ``-m aura ...`` or ``aura.train.*``) is found
again at each sample; the RAM shown is the resident memory (RSS) of those processes and all their
descendants together (for torchrun: the agent and every worker on this host).

``--json`` prints one JSON object per line and sample, with these stable fields:

``time`` (ISO 8601, local time, seconds), ``cpu_percent``, ``ram_percent``, ``ram_used_gib``,
``ram_total_gib``, ``process_pids`` (list of ints), ``process_ram_gib`` (null when no training
process is found), ``gpus`` (list of ``{index, name, utilization_percent, memory_used_gib,
memory_total_gib, temperature_c, power_w, power_limit_w, process_memory_gib}``; a value NVML cannot
report is null), ``gpu_error`` (null, or why there are no GPU figures: ``pynvml_missing``, ``nvml_not_found``,
``nvml_failed``, ``no_gpu``), ``gpu_error_message`` (the same, in words, in the user's language).
"""

from __future__ import annotations

import json as jsonlib
import os
import time
from dataclasses import dataclass
from datetime import datetime

import psutil

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num

GIB = 1024**3

M = Messages(
    "monitor",
    {
        "line": (
            "[{time}] CPU: {cpu:.1f}% | RAM: {ram_pct:.1f}% ({ram_used:.1f} GB / {ram_total:.1f} GB)"
            " | RAM proceso: {proc}",
            "[{time}] CPU: {cpu:.1f}% | RAM: {ram_pct:.1f}% ({ram_used:.1f} GB / {ram_total:.1f} GB)"
            " | Process RAM: {proc}",
        ),
        "gpu_line": (
            "  - GPU {index} ({name}) | Utilización: {util} | Memoria: {mem_used} / {mem_total}"
            " | Temp: {temp} | Potencia: {power}",
            "  - GPU {index} ({name}) | Utilization: {util} | Memory: {mem_used} / {mem_total}"
            " | Temp: {temp} | Power: {power}",
        ),
        "no_process": ("sin entrenamiento", "no training"),
        "not_available": ("n/d", "n/a"),
        "no_nvml": (
            "sin métricas de GPU: no se encontró la biblioteca NVML (sin GPU NVIDIA o sin "
            "controlador; en WSL confirma que nvidia-smi funciona)",
            "no GPU metrics: the NVML library was not found (no NVIDIA GPU or no driver; on WSL "
            "check that nvidia-smi works)",
        ),
        "no_pynvml": (
            "sin métricas de GPU: falta el paquete nvidia-ml-py (pip install nvidia-ml-py)",
            "no GPU metrics: the nvidia-ml-py package is missing (pip install nvidia-ml-py)",
        ),
        "nvml_failed": ("sin métricas de GPU: NVML falló ({err})", "no GPU metrics: NVML failed ({err})"),
        "no_gpu": ("sin métricas de GPU: NVML no ve ninguna GPU", "no GPU metrics: NVML sees no GPU"),
        "bad_interval": (
            "--interval debe ser mayor que 0 (segundos entre muestras); recibido {value}.",
            "--interval must be greater than 0 (seconds between samples); got {value}.",
        ),
        "bad_count": (
            "--count debe ser 0 (sin límite) o un número positivo de muestras; recibido {value}.",
            "--count must be 0 (no limit) or a positive number of samples; got {value}.",
        ),
        "bad_pid": (
            "No hay ningún proceso con PID {pid} en esta máquina. Omite --pid para detectar "
            "automáticamente los entrenamientos de Aura.",
            "There is no process with PID {pid} on this machine. Leave out --pid to find Aura "
            "training processes automatically.",
        ),
        "pid_gone": ("El proceso {pid} ha terminado.", "Process {pid} has exited."),
    },
)


@dataclass
class MonitorConfig:
    interval: float = arg(4.0, es="Segundos entre muestras.", en="Seconds between samples.")
    once: bool = arg(False, es="Una sola muestra y salir.", en="Take one sample and exit.")
    count: int = arg(
        0,
        es="Número de muestras antes de salir (0 = hasta Ctrl+C).",
        en="Number of samples before exiting (0 = until Ctrl+C).",
    )
    json: bool = arg(
        False,
        es="Una línea JSON por muestra (campos estables; ver la documentación).",
        en="One JSON line per sample (stable fields; see the documentation).",
    )
    pid: int | None = arg(
        None,
        es="PID del proceso de entrenamiento a seguir (con sus hijos); por "
        "defecto se detectan los entrenamientos de Aura en marcha.",
        en="PID of the training process to follow (with its children); by default "
        "running Aura trainings are found automatically.",
        metavar="PID",
    )

    def __post_init__(self):
        if not self.interval > 0:
            raise AuraError(M("bad_interval", value=self.interval))
        if self.count < 0:
            raise AuraError(M("bad_count", value=self.count))
        if self.pid is not None and not psutil.pid_exists(self.pid):
            raise AuraError(M("bad_pid", pid=self.pid))


# ---------------------------------------------------------------- training processes

_TRAIN_COMMANDS = {"pretrain", "finetune"}
_TRAIN_MODULES = {"aura.train.pretrain", "aura.train.finetune"}


def is_training_cmdline(cmdline: list[str]) -> bool:
    """True for ``aura pretrain ...``, ``python -m aura finetune ...``, ``torchrun ... -m aura ...``."""
    for i, tok in enumerate(cmdline):
        if tok in _TRAIN_MODULES:
            return True
        # "aura" (the console script, any path), "-m aura", or "path/to/aura/__main__.py"
        launcher = os.path.basename(tok) == "aura" or tok.endswith(os.path.join("aura", "__main__.py"))
        if launcher and any(t in _TRAIN_COMMANDS for t in cmdline[i + 1 : i + 4]):
            return True
    return False


def find_training_processes() -> list[psutil.Process]:
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.info["pid"] != me and is_training_cmdline(cmd):
            found.append(proc)
    return found


def process_tree_rss(roots: list[psutil.Process]) -> tuple[list[int], int]:
    """PIDs and total resident memory of ``roots`` and every descendant, each counted once."""
    seen: dict[int, int] = {}
    for root in roots:
        try:
            family = [root] + root.children(recursive=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for p in family:
            if p.pid in seen:
                continue
            try:
                seen[p.pid] = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return sorted(seen), sum(seen.values())


# ---------------------------------------------------------------- GPUs through NVML


class GPUReader:
    """NVML opened once; ``read(pids)`` returns one dict per GPU (empty, with ``error`` set, if none)."""

    def __init__(self):
        self.nvml = None
        self.handles: list = []
        self.error_code: str | None = None  # stable, for --json: see the module docstring
        self.error: str | None = None
        try:
            import pynvml
        except ImportError:
            self.error_code, self.error = "pynvml_missing", M("no_pynvml")
            return
        try:
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except pynvml.NVMLError_LibraryNotFound:
            self.error_code, self.error = "nvml_not_found", M("no_nvml")
            return
        except pynvml.NVMLError as e:
            self.error_code, self.error = "nvml_failed", M("nvml_failed", err=e)
            return
        if not self.handles:
            self.error_code, self.error = "no_gpu", M("no_gpu")

    def _get(self, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError:
            return None

    def read(self, pids: list[int]) -> list[dict]:
        if not self.handles:
            return []
        nv, out = self.nvml, []
        for i, h in enumerate(self.handles):
            name = self._get(nv.nvmlDeviceGetName, h)
            util = self._get(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._get(nv.nvmlDeviceGetMemoryInfo, h)
            temp = self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            power = self._get(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
            limit = self._get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            procs = self._get(nv.nvmlDeviceGetComputeRunningProcesses, h)
            proc_mem = None
            if pids and procs is not None:
                wanted = set(pids)
                proc_mem = sum((p.usedGpuMemory or 0) for p in procs if p.pid in wanted) / GIB
            out.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "utilization_percent": None if util is None else float(util.gpu),
                    "memory_used_gib": None if mem is None else mem.used / GIB,
                    "memory_total_gib": None if mem is None else mem.total / GIB,
                    "temperature_c": None if temp is None else float(temp),
                    "power_w": None if power is None else power / 1000,
                    "power_limit_w": None if limit is None else limit / 1000,
                    "process_memory_gib": proc_mem,
                }
            )
        return out

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass


# ---------------------------------------------------------------- samples


def take_sample(gpus: GPUReader, *, pid: int | None) -> dict:
    """One sample; ``psutil.cpu_percent`` must have been primed (it measures since the last call)."""
    vm = psutil.virtual_memory()
    if pid is not None:
        try:
            roots = [psutil.Process(pid)]
        except psutil.NoSuchProcess:
            roots = []
    else:
        roots = find_training_processes()
    pids, rss = process_tree_rss(roots)
    gpu_list = gpus.read(pids)
    return {
        "time": datetime.now().isoformat(timespec="seconds"),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "ram_percent": vm.percent,
        "ram_used_gib": (vm.total - vm.available) / GIB,
        "ram_total_gib": vm.total / GIB,
        "process_pids": pids,
        "process_ram_gib": rss / GIB if pids else None,
        "gpus": gpu_list,
        "gpu_error": gpus.error_code,
        "gpu_error_message": gpus.error,
    }


def _fmt(value, spec: str, unit: str) -> str:
    return M("not_available") if value is None else f"{num(value, spec)}{unit}"


def format_sample(s: dict) -> list[str]:
    proc = M("no_process") if s["process_ram_gib"] is None else f"{num(s['process_ram_gib'], '.1f')} GB"
    lines = [
        M(
            "line",
            time=s["time"].replace("T", " "),
            cpu=s["cpu_percent"],
            ram_pct=s["ram_percent"],
            ram_used=s["ram_used_gib"],
            ram_total=s["ram_total_gib"],
            proc=proc,
        )
    ]
    for g in s["gpus"]:
        power = _fmt(g["power_w"], ".0f", " W")
        if g["power_limit_w"] is not None and g["power_w"] is not None:
            power += f" / {num(g['power_limit_w'], '.0f')} W"
        lines.append(
            M(
                "gpu_line",
                index=g["index"],
                name=g["name"] or "?",
                util=_fmt(g["utilization_percent"], ".0f", "%"),
                mem_used=_fmt(g["memory_used_gib"], ".1f", " GB"),
                mem_total=_fmt(g["memory_total_gib"], ".1f", " GB"),
                temp=_fmt(g["temperature_c"], ".0f", "°C"),
                power=power,
            )
        )
    if s["gpu_error_message"]:
        lines.append(f"  - GPU: {s['gpu_error_message']}")
    return lines


def monitor(cfg: MonitorConfig) -> int:
    total = 1 if cfg.once else cfg.count
    gpus = GPUReader()
    try:
        # cpu_percent measures since its previous call: prime it, and make the first sample cover
        # a real window (half a second, or the whole interval when sampling repeatedly).
        psutil.cpu_percent(interval=None)
        time.sleep(min(cfg.interval, 0.5))
        taken = 0
        while True:
            sample = take_sample(gpus, pid=cfg.pid)
            if cfg.json:
                print(jsonlib.dumps(sample, ensure_ascii=False), flush=True)
            else:
                print("\n".join(format_sample(sample)), flush=True)
            taken += 1
            if total and taken >= total:
                return 0
            if cfg.pid is not None and not sample["process_pids"]:
                print(M("pid_gone", pid=cfg.pid), flush=True)
                return 0
            time.sleep(cfg.interval)
    except KeyboardInterrupt:
        if not cfg.json:  # end the line ^C left; JSON consumers get only whole objects
            print(flush=True)
        return 0
    finally:
        gpus.close()
