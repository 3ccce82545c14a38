"""``aura doctor``: is this environment ready to train, and what would ``auto`` pick here?

Reports Python, torch (version and build: CUDA, ROCm or CPU), CUDA/NCCL/gloo, GPUs with memory and
bf16, CPU bf16 (AMX / AVX-512-bf16 flags), which scaled-dot-product-attention kernels actually run on
this device (each is tried on a tiny tensor), the flash-attn package, free disk where outputs go,
required and optional packages with versions, network interfaces (and which one to give NCCL/gloo
for multi-node), and the preset/batch/precision/strategy ``auto`` would choose.

Exit status: 0 when everything required works (no GPU is not an error), 1 when something required
is broken (torch missing or unimportable, a required package missing or too old, the output
directory not writable, the disk nearly full); each problem comes with what to do.
``--json`` prints the same report as one JSON object: ``ok``, ``issues`` [{level (error, warning or
note), message, advice}],
and one object per section (python, torch, gpus, distributed, cpu, attention, disk, dependencies,
extras, network, auto).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.watch.doctor_checks import (
    M,
    Report,
    check_attention,
    check_auto,
    check_cpu,
    check_disk,
    check_distributed,
    check_extras,
    check_gpus,
    check_network,
    check_packages,
    check_python,
    check_torch,
)


@dataclass
class DoctorConfig:
    output_dir: str = arg(
        ".",
        es="Directorio donde se guardarán los resultados (se comprueba el disco).",
        en="Directory where outputs will go (its disk is checked).",
    )
    min_free_gb: float = arg(
        2.0,
        es="Espacio libre mínimo en GiB; por debajo es un error.",
        en="Minimum free space in GiB; below it is an error.",
    )
    json: bool = arg(False, es="Salida JSON (un objeto).", en="JSON output (one object).")
    assume: str = arg(
        "",
        es='Qué haría `auto` en otro hardware: "H100 80GB", "RTX 3060 12GB", "24GB", '
        '"cpu" (nombre y memoria de la GPU).',
        en='What `auto` would do on other hardware: "H100 80GB", "RTX 3060 12GB", "24GB", '
        '"cpu" (the GPU\'s name and memory).',
    )

    def __post_init__(self):
        if self.min_free_gb < 0:
            raise AuraError(M("bad_min_free", value=self.min_free_gb))
        if self.assume:
            from aura.models.hardware import assumed_hardware

            try:
                assumed_hardware(self.assume)
            except ValueError:
                raise AuraError(M("bad_assume", value=self.assume)) from None


def doctor(cfg: DoctorConfig) -> int:
    from aura.watch.monitor import GPUReader

    nvml = GPUReader()
    nvml_gpus = len(nvml.handles)
    nvml.close()
    r = Report()
    sections = []

    def section(key: str, fn, *args):
        start = len(r.rows)
        result = fn(r, *args)
        sections.append((M(key) if key in M.table else key, r.rows[start:]))
        return result

    section("Python", check_python)
    torch = section("PyTorch", check_torch, nvml_gpus)  # None when torch cannot be imported
    section("s_gpus", check_gpus, torch)
    section("s_dist", check_distributed, torch)
    section("s_cpu", check_cpu, torch)
    section("s_attention", check_attention, torch)
    section("s_disk", check_disk, cfg.output_dir, cfg.min_free_gb)
    section("s_deps", check_packages)
    section("s_extras", check_extras)
    section("s_network", check_network)
    section("s_auto", check_auto, torch, cfg.assume)
    errors = [i for i in r.issues if i["level"] == "error"]
    warns = [i for i in r.issues if i["level"] == "warning"]
    notes = [i for i in r.issues if i["level"] == "note"]
    if cfg.json:
        print(json.dumps({"ok": not errors, "issues": r.issues, **r.data}, indent=2, ensure_ascii=False, default=str))
        return 1 if errors else 0
    for title, rows in sections:
        console.table(
            title,
            [M("h_check"), M("h_result"), M("h_state")],
            [(c, res, "" if state == "info" else M(state)) for c, res, state in rows],
        )
    if notes:
        console.info(M("notes"))
        for i in notes:
            console.info(f"{i['message']} → {i['advice']}")
    if warns:
        console.info(M("warnings"))
        for i in warns:
            console.warn(f"{i['message']} → {i['advice']}")
    if errors:
        console.error(M("problems", n=len(errors)))
        for i in errors:
            console.error(f"{i['message']} → {i['advice']}")
        return 1
    console.success(M("all_ok"))
    return 0
