"""The checks ``aura doctor`` runs, each adding rows and advice to a ``Report``."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from aura.core.atomic import human_bytes
from aura.core.i18n import Messages

M = Messages(
    "doctor",
    {
        "title": ("Diagnóstico de Aura", "Aura check-up"),
        "h_check": ("comprobación", "check"),
        "h_result": ("resultado", "result"),
        "h_state": ("estado", "state"),
        "ok": ("bien", "ok"),
        "warn": ("aviso", "warning"),
        "fail": ("FALLO", "FAILED"),
        "yes": ("sí", "yes"),
        "no": ("no", "no"),
        "none": ("ninguna", "none"),
        "not_installed": ("no instalado", "not installed"),
        "python_old": (
            "Python {version} es demasiado antiguo: Aura necesita 3.10 o posterior.",
            "Python {version} is too old: Aura needs 3.10 or later.",
        ),
        "python_old_fix": (
            "Crea el entorno con Python 3.10+ (p. ej. uv venv -p 3.11).",
            "Create the environment with Python 3.10+ (e.g. uv venv -p 3.11).",
        ),
        "torch_broken": ("No se puede importar torch: {err}", "torch cannot be imported: {err}"),
        "torch_fix": (
            "Instala PyTorch para tu hardware siguiendo https://pytorch.org/get-started/locally/ (CUDA, ROCm o CPU).",
            "Install PyTorch for your hardware following https://pytorch.org/get-started/locally/ (CUDA, ROCm or CPU).",
        ),
        "cpu_torch_with_gpu": (
            "NVML ve {n} GPU NVIDIA pero este torch es solo para CPU.",
            "NVML sees {n:NVIDIA GPU|NVIDIA GPUs} but this torch is CPU-only.",
        ),
        "cpu_torch_fix": (
            "Reinstala torch con CUDA (https://pytorch.org/get-started/locally/).",
            "Reinstall torch with CUDA (https://pytorch.org/get-started/locally/).",
        ),
        "cuda_unusable": (
            "torch está compilado con CUDA {cuda} pero no ve ninguna GPU.",
            "torch is built with CUDA {cuda} but sees no GPU.",
        ),
        "cuda_unusable_fix": (
            "Comprueba que nvidia-smi funciona, que el controlador admite CUDA {cuda} y CUDA_VISIBLE_DEVICES.",
            "Check that nvidia-smi works, that the driver supports CUDA {cuda}, and CUDA_VISIBLE_DEVICES.",
        ),
        "cuda_build_no_gpu": (
            "Este torch está compilado con CUDA {cuda}, pero aquí no hay ninguna GPU: funciona "
            "igual en la CPU, así que entrenar en CPU va bien.",
            "This torch is built with CUDA {cuda}, but there is no GPU here: it works the same on "
            "the CPU, so CPU training is fine.",
        ),
        "cpu_build_tip": (
            "Si esta máquina no va a tener GPU, la versión de torch solo para CPU ocupa unos 3 GB "
            "menos: pip install torch --index-url https://download.pytorch.org/whl/cpu",
            "If this machine will not have a GPU, the CPU-only build of torch takes about 3 GB "
            "less: pip install torch --index-url https://download.pytorch.org/whl/cpu",
        ),
        "notes": ("Notas:", "Notes:"),
        "dep_missing": ("Falta el paquete requerido {name}.", "The required package {name} is missing."),
        "dep_old": ("{name} {version} no cumple {spec}.", "{name} {version} does not satisfy {spec}."),
        "dep_fix": (
            "pip install '{req}'  (o reinstala Aura: pip install -e .)",
            "pip install '{req}'  (or reinstall Aura: pip install -e .)",
        ),
        "dir_unwritable": ("No se puede escribir en {path}: {err}", "{path} is not writable: {err}"),
        "dir_fix": (
            "Elige otro --output-dir o corrige los permisos.",
            "Choose another --output-dir or fix the permissions.",
        ),
        "disk_full": (
            "Solo quedan {free} libres en {path} (mínimo {min}).",
            "Only {free} free on {path} (minimum {min}).",
        ),
        "disk_low": (
            "Quedan {free} libres en {path}: un preentrenamiento largo con checkpoints puede necesitar decenas de GB.",
            "{free} free on {path}: a long pretraining with checkpoints can need tens of GB.",
        ),
        "disk_fix": (
            "Libera espacio, usa otro --output-dir o un --keep-last más bajo.",
            "Free some space, use another --output-dir or a lower --keep-last.",
        ),
        "ifname_missing": (
            "{var}={value} no es una interfaz de esta máquina ({names}).",
            "{var}={value} is not an interface of this machine ({names}).",
        ),
        "ifname_fix": (
            "Usa una de las interfaces listadas, p. ej. export {var}={suggest}",
            "Use one of the interfaces listed, e.g. export {var}={suggest}",
        ),
        "s_gpus": ("GPU", "GPUs"),
        "s_dist": ("Comunicación distribuida", "Distributed communication"),
        "s_cpu": ("CPU y memoria", "CPU and memory"),
        "s_attention": ("Atención (SDPA)", "Attention (SDPA)"),
        "s_disk": ("Disco", "Disk"),
        "s_deps": ("Paquetes requeridos", "Required packages"),
        "s_extras": ("Extras opcionales", "Optional extras"),
        "s_network": ("Red", "Network"),
        "s_auto": ("Qué elegiría 'auto'", "What 'auto' would pick"),
        "build_cpu": ("solo CPU", "CPU only"),
        "no_gpu": (
            "ninguna (se entrena en CPU; bien para pruebas y modelos diminutos)",
            "none (training runs on CPU: fine for tests and tiny models)",
        ),
        "gpu_row": (
            "{name}, {mem:.1f} GiB, cómputo {cap}, bf16 {bf16}",
            "{name}, {mem:.1f} GiB, compute {cap}, bf16 {bf16}",
        ),
        "ram": ("{total:.1f} GiB en total, {avail:.1f} GiB libres", "{total:.1f} GiB total, {avail:.1f} GiB free"),
        "cores": (
            "{logical:lógico|lógicos}, {usable:utilizable|utilizables} por Aura",
            "{logical} logical, {usable} usable by Aura",
        ),
        "cpu_bf16": (
            "AMX-bf16: {amx}, AVX-512-bf16: {avx}; bf16 rápido en CPU: {fast}",
            "AMX-bf16: {amx}, AVX-512-bf16: {avx}; fast bf16 on CPU: {fast}",
        ),
        "sdpa_device": ("núcleos que funcionan en {device} ({dtype})", "kernels that run on {device} ({dtype})"),
        "disk_row": ("{free} libres de {total}", "{free} free of {total}"),
        "writable": ("escribible", "writable"),
        "suggest_if": (
            "Para varios nodos: export NCCL_SOCKET_IFNAME={name} GLOO_SOCKET_IFNAME={name}",
            "For several nodes: export NCCL_SOCKET_IFNAME={name} GLOO_SOCKET_IFNAME={name}",
        ),
        "no_suggest_if": (
            "No hay ninguna interfaz activa con IPv4 aparte de loopback: un entrenamiento "
            "multinodo no podrá conectarse.",
            "No active interface with IPv4 other than loopback: multi-node training will not be able to connect.",
        ),
        "several_if": (
            "Hay varias interfaces candidatas; usa la de la red que une los nodos.",
            "Several candidate interfaces; use the one on the network that joins the nodes.",
        ),
        "auto_unknown": (
            "desconocido todavía (aura.models.hardware no disponible: {err})",
            "unknown yet (aura.models.hardware not available: {err})",
        ),
        "auto_row": (
            "preset {preset}, lote {batch} × acumulación {accum}, precisión {precision}, gradient checkpointing {ckpt}",
            "preset {preset}, batch {batch} × accumulation {accum}, precision {precision}, "
            "gradient checkpointing {ckpt}",
        ),
        "strategy_single": (
            "ninguna, --strategy none (un proceso por nodo con {n:dispositivo|dispositivos})",
            "none (one process on a node with {n:device|devices})",
        ),
        "strategy_multi": (
            "ddp con aura launch en {n} GPU (el preset cabe en una GPU)",
            "ddp with aura launch on {n:GPU|GPUs} (the preset fits one GPU)",
        ),
        "all_ok": ("Todo lo necesario funciona.", "Everything required works."),
        "problems": ("{n:problema impide|problemas impiden} entrenar:", "{n:problem stops|problems stop} training:"),
        "warnings": ("Avisos:", "Warnings:"),
        "x_bnb": ("QLoRA en 4 bits, AdamW8bit", "4-bit QLoRA, AdamW8bit"),
        "x_deepspeed": ("ZeRO-2/3 con --deepspeed", "ZeRO-2/3 with --deepspeed"),
        "x_llamacpp": ("verificar GGUF y chatear con GGUF", "GGUF verification and GGUF chat"),
        "x_liger": (
            "entropía cruzada fusionada con la capa de salida en CUDA (menos memoria con vocabularios grandes)",
            "fused output layer + cross entropy on CUDA (less memory with large vocabularies)",
        ),
        "x_flash": (
            "FlashAttention-2 con attn_implementation=flash_attention_2",
            "FlashAttention-2 with attn_implementation=flash_attention_2",
        ),
        "x_wandb": (
            "--report-to wandb (Weights & Biases; sin red con WANDB_MODE=offline)",
            "--report-to wandb (Weights & Biases; without a network with WANDB_MODE=offline)",
        ),
        "x_mlflow": (
            "--report-to mlflow (servidor en MLFLOW_TRACKING_URI)",
            "--report-to mlflow (server at MLFLOW_TRACKING_URI)",
        ),
        "x_trackio": (
            "--report-to trackio (almacén local, trackio show)",
            "--report-to trackio (local store, trackio show)",
        ),
        "down": ("inactiva", "down"),
        "strategy": ("estrategia", "strategy"),
        "bad_min_free": (
            "--min-free-gb debe ser 0 o positivo; recibido {value}.",
            "--min-free-gb must be 0 or positive; got {value}.",
        ),
        "bad_assume": (
            "--assume no describe un dispositivo: '{value}'. Escribe el nombre y la memoria de la GPU "
            '("H100 80GB", "RTX 3060 12GB"), solo la memoria ("24GB") o "cpu".',
            "--assume does not describe a device: '{value}'. Give the GPU's name and memory "
            '("H100 80GB", "RTX 3060 12GB"), only its memory ("24GB") or "cpu".',
        ),
        "assumed": (
            "supuesto (--assume): {name}, {mem:.1f} GiB, capacidad {cap}; pico {peak}",
            "assumed (--assume): {name}, {mem:.1f} GiB, capability {cap}; peak {peak}",
        ),
        "no_peak": ("desconocido (sin MFU)", "unknown (no MFU)"),
    },
)

GIB = 1024**3


# Distribution name, import name, minimum version: kept equal to pyproject's dependencies (a test checks).
REQUIRED = [
    ("torch", "torch", "2.11"),
    ("transformers", "transformers", "5.0"),
    ("tokenizers", "tokenizers", "0.21"),
    ("safetensors", "safetensors", "0.4"),
    ("peft", "peft", "0.17"),
    ("accelerate", "accelerate", "1.0"),
    ("datasets", "datasets", "3.0"),
    ("tensorboard", "tensorboard", "2.15"),
    ("gguf", "gguf", "0.17"),
    ("numpy", "numpy", "1.24"),
    ("pyarrow", "pyarrow", "14.0.1"),
    ("pyyaml", "yaml", "6"),
    ("zstandard", "zstandard", "0.22"),
    ("psutil", "psutil", "5.9"),
    ("nvidia-ml-py", "pynvml", "12"),
    ("rich", "rich", "13"),
    ("matplotlib", "matplotlib", "3.7"),
    ("huggingface_hub", "huggingface_hub", "1.0"),
]


# Optional extras and what each one enables.
EXTRAS = [
    ("bitsandbytes", "bitsandbytes", "x_bnb"),
    ("deepspeed", "deepspeed", "x_deepspeed"),
    ("llama-cpp-python", "llama_cpp", "x_llamacpp"),
    ("liger-kernel", "liger_kernel", "x_liger"),
    ("flash-attn", "flash_attn", "x_flash"),
    ("wandb", "wandb", "x_wandb"),
    ("mlflow-skinny", "mlflow", "x_mlflow"),
    ("trackio", "trackio", "x_trackio"),
]


SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


class Report:
    def __init__(self):
        self.data: dict = {}
        self.rows: list[tuple[str, str, str]] = []  # (check, result, state)
        self.issues: list[dict] = []

    def row(self, check: str, result: object, state: str = "info") -> None:
        self.rows.append((check, str(result), state))

    def issue(self, level: str, message: str, advice: str) -> None:
        self.issues.append({"level": level, "message": message, "advice": advice})


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _importable(module: str) -> bool:
    """Found on the path, without importing it (deepspeed or peft take seconds to import)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module blocked in sys.modules
        return False


def _at_least(version: str, minimum: str) -> bool:
    try:
        from packaging.version import Version

        return Version(version) >= Version(minimum)
    except Exception:  # unparsable local versions: do not block on them
        return True


def _yn(flag: bool) -> str:
    return M("yes") if flag else M("no")


def check_python(r: Report) -> None:
    v = platform.python_version()
    ok = sys.version_info >= (3, 10)
    r.data["python"] = {"version": v, "executable": sys.executable, "platform": platform.platform()}
    r.row("Python", f"{v} ({sys.executable})", "ok" if ok else "fail")
    if not ok:
        r.issue("error", M("python_old", version=v), M("python_old_fix"))


def check_torch(r: Report, nvml_gpus: int):
    try:
        import torch
    except Exception as e:  # missing, or a broken binary (wrong CUDA libs, ABI): both block training
        r.data["torch"] = {"importable": False, "error": str(e)}
        r.row("torch", M("torch_broken", err=e), "fail")
        r.issue("error", M("torch_broken", err=e), M("torch_fix"))
        return None
    build = (
        f"CUDA {torch.version.cuda}"
        if torch.version.cuda
        else f"ROCm {torch.version.hip}"
        if getattr(torch.version, "hip", None)
        else M("build_cpu")
    )
    cuda = torch.cuda.is_available()
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    r.data["torch"] = {
        "importable": True,
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "hip_build": getattr(torch.version, "hip", None),
        "cuda_available": cuda,
        "mps_available": mps,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
    }
    r.row("torch", f"{torch.__version__} ({build})", "ok")
    r.row("CUDA", _yn(cuda) + (f", {torch.cuda.device_count()} GPU" if cuda else ""), "ok" if cuda else "info")
    if mps:
        r.row("Apple MPS", M("yes"))
    if not cuda and torch.version.cuda:
        if nvml_gpus or any(Path("/dev").glob("nvidia[0-9]*")):  # a GPU is there but torch cannot use it
            r.issue(
                "warning", M("cuda_unusable", cuda=torch.version.cuda), M("cuda_unusable_fix", cuda=torch.version.cuda)
            )
        else:  # a CPU-only machine with the default (CUDA) wheel: nothing is wrong
            r.issue("note", M("cuda_build_no_gpu", cuda=torch.version.cuda), M("cpu_build_tip"))
    if not cuda and not torch.version.cuda and not getattr(torch.version, "hip", None) and nvml_gpus:
        r.issue("warning", M("cpu_torch_with_gpu", n=nvml_gpus), M("cpu_torch_fix"))
    return torch


def check_gpus(r: Report, torch) -> None:
    gpus = []
    if torch is not None and torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            bf16 = p.major >= 8 or (getattr(torch.version, "hip", None) is not None)
            gpus.append(
                {
                    "index": i,
                    "name": p.name,
                    "memory_gib": p.total_memory / GIB,
                    "capability": f"{p.major}.{p.minor}",
                    "bf16": bf16,
                }
            )
            r.row(
                f"GPU {i}",
                M("gpu_row", name=p.name, mem=p.total_memory / GIB, cap=f"{p.major}.{p.minor}", bf16=_yn(bf16)),
                "ok",
            )
    else:
        r.row("GPU", M("no_gpu"))
    r.data["gpus"] = gpus


def check_distributed(r: Report, torch) -> None:
    d = {"available": False, "nccl": False, "nccl_version": None, "gloo": False}
    if torch is not None and torch.distributed.is_available():
        d.update(available=True, nccl=torch.distributed.is_nccl_available(), gloo=torch.distributed.is_gloo_available())
        if d["nccl"] and torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            d["nccl_version"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    r.data["distributed"] = d
    r.row(
        "NCCL", _yn(d["nccl"]) + (f" ({d['nccl_version']})" if d["nccl_version"] else ""), "ok" if d["nccl"] else "info"
    )
    r.row("gloo", _yn(d["gloo"]), "ok" if d["gloo"] else "warn")


def check_cpu(r: Report, torch) -> None:
    import psutil

    from aura.models.hardware import cpu_count, cpu_fast_bf16, cpu_flags, cpu_name

    flags, usable, name = cpu_flags(), cpu_count(), cpu_name()
    amx, avx = "amx_bf16" in flags, "avx512_bf16" in flags
    fast = cpu_fast_bf16(flags) if torch is not None else amx or avx  # also asks torch's CPU probes
    vm = psutil.virtual_memory()
    r.data["cpu"] = {
        "name": name,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "amx_bf16": amx,
        "avx512_bf16": avx,
        "avx512f": "avx512f" in flags,
        "fast_bf16": fast,
        "ram_total_gib": vm.total / GIB,
        "ram_available_gib": vm.available / GIB,
    }
    r.row("CPU", f"{name}; " + M("cores", logical=os.cpu_count(), usable=usable))
    r.row("CPU bf16", M("cpu_bf16", amx=_yn(amx), avx=_yn(avx), fast=_yn(fast)))
    r.row("RAM", M("ram", total=vm.total / GIB, avail=vm.available / GIB))


def check_attention(r: Report, torch) -> None:
    works: dict[str, bool] = {}
    device, dtype = "cpu", "float32"
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        cuda = torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        tdtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32
        dtype = str(tdtype).replace("torch.", "")
        q = torch.randn(1, 2, 16, 64, device=device, dtype=tdtype)  # (B, heads, T, head_dim)
        for name in SDPA_BACKENDS:
            backend = getattr(SDPBackend, name, None)
            if backend is None:
                continue
            try:  # actually run it: "compiled in" is not "usable on this GPU with this dtype"
                with warnings.catch_warnings(), sdpa_kernel([backend]):
                    warnings.simplefilter("ignore")
                    torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
                works[name.lower()] = True
            except RuntimeError:
                works[name.lower()] = False
    fa = _version("flash-attn")
    r.data["attention"] = {"device": device, "dtype": dtype, "sdpa": works, "flash_attn_package": fa}
    usable = ", ".join(k for k, v in works.items() if v) or M("none")
    r.row("SDPA", f"{usable} — {M('sdpa_device', device=device, dtype=dtype)}")
    r.row("flash-attn", fa or M("not_installed"))


def check_disk(r: Report, output_dir: str, min_free_gb: float) -> None:
    path = Path(output_dir).absolute()
    probe = path
    while not probe.exists() and probe != probe.parent:  # commands create the dir: check its parent
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    writable, err = True, ""
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".tmp-aura-doctor-"):
            pass
    except OSError as e:
        writable, err = False, e.strerror or str(e)
    r.data["disk"] = {
        "path": str(path),
        "checked": str(probe),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
        "writable": writable,
    }
    free = human_bytes(usage.free)
    low = usage.free < min_free_gb * GIB
    r.row(
        str(path),
        M("disk_row", free=free, total=human_bytes(usage.total)) + (f", {M('writable')}" if writable else ""),
        "fail" if low or not writable else "ok",
    )
    if not writable:
        r.issue("error", M("dir_unwritable", path=probe, err=err), M("dir_fix"))
    if low:
        r.issue("error", M("disk_full", free=free, path=probe, min=human_bytes(min_free_gb * GIB)), M("disk_fix"))
    elif usage.free < 10 * GIB:
        r.issue("warning", M("disk_low", free=free, path=probe), M("disk_fix"))


def check_packages(r: Report) -> None:
    deps = {}
    for dist, module, minimum in REQUIRED:
        v = _version(dist)
        found = v is not None and _importable(module)
        ok = found and _at_least(v, minimum)
        deps[dist] = {"version": v, "minimum": minimum, "ok": ok}
        r.row(dist, v or M("not_installed"), "ok" if ok else "fail")
        if not found:
            r.issue("error", M("dep_missing", name=dist), M("dep_fix", req=f"{dist}>={minimum}"))
        elif not ok:
            r.issue(
                "error", M("dep_old", name=dist, version=v, spec=f">={minimum}"), M("dep_fix", req=f"{dist}>={minimum}")
            )
    r.data["dependencies"] = deps


def check_extras(r: Report) -> None:
    extras = {}
    for dist, module, purpose_key in EXTRAS:
        purpose = M(purpose_key)
        v = _version(dist) if _importable(module) else None
        extras[dist] = {"version": v, "enables": purpose}
        r.row(dist, f"{v or M('not_installed')} — {purpose}", "ok" if v else "info")
    r.data["extras"] = extras


def check_network(r: Report) -> None:
    import psutil

    stats = psutil.net_if_stats()
    interfaces, candidates = [], []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        ipv4 = [a.address for a in addrs if a.family.name == "AF_INET"]
        ipv6 = [a.address.split("%")[0] for a in addrs if a.family.name == "AF_INET6"]
        st = stats.get(name)
        up = bool(st and st.isup)
        interfaces.append({"name": name, "up": up, "speed_mbps": st.speed if st else None, "ipv4": ipv4, "ipv6": ipv6})
        r.row(
            name,
            ", ".join(ipv4 + ipv6)
            + ("" if up else f" ({M('down')})")
            + (f" — {st.speed} Mb/s" if st and st.speed else ""),
        )
        virtual = name.startswith(("lo", "docker", "br-", "virbr", "veth", "cni", "flannel", "tailscale"))
        if up and ipv4 and not virtual and not all(a.startswith("127.") for a in ipv4):
            candidates.append(name)
    names = [i["name"] for i in interfaces]
    env = {var: os.environ.get(var) for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR")}
    r.data["network"] = {
        "interfaces": interfaces,
        "suggested_ifname": candidates[0] if candidates else None,
        "candidates": candidates,
        "env": env,
    }
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = env[var]
        if value:
            r.row(var, value)
            wanted = [v for v in value.lstrip("^=").split(",") if v]
            if not value.startswith("^") and not any(n.startswith(w) for w in wanted for n in names):
                r.issue(
                    "warning",
                    M("ifname_missing", var=var, value=value, names=", ".join(names)),
                    M("ifname_fix", var=var, suggest=candidates[0] if candidates else names[0]),
                )
    if candidates:
        r.row("→", M("suggest_if", name=candidates[0]))
        if len(candidates) > 1:
            r.row("→", M("several_if"))
    else:
        r.row("→", M("no_suggest_if"), "warn")


def check_auto(r: Report, torch, assume: str = "") -> None:
    if torch is None:
        r.data["auto"] = None
        r.row("auto", M("auto_unknown", err="torch"), "fail")
        return
    try:
        from aura.models import hardware

        info = hardware.assumed_hardware(assume) if assume else hardware.detect()
        choice = hardware.choose_auto(info)
    except (ImportError, AttributeError) as e:
        r.data["auto"] = None
        r.row("auto", M("auto_unknown", err=e), "warn")
        return
    n = info.count if info.device_type == "cuda" else 1
    strategy = M("strategy_multi", n=n) if n > 1 else M("strategy_single", n=n)
    r.data["auto"] = {"hardware": info.to_dict(), **choice.to_dict(), "strategy": "ddp" if n > 1 else "none"}
    r.row(
        "auto",
        M(
            "auto_row",
            preset=choice.preset,
            batch=choice.batch_size,
            accum=choice.gradient_accumulation_steps,
            precision=choice.precision,
            ckpt=_yn(choice.gradient_checkpointing),
        ),
    )
    r.row(M("strategy"), strategy)
    if assume:
        cap = "{}.{}".format(*info.capability) if info.capability else "-"
        r.row(
            "--assume",
            M(
                "assumed",
                name=info.name,
                mem=info.memory_bytes / 1024**3,
                cap=cap,
                peak=info.peak_source or M("no_peak"),
            ),
        )
    r.row("→", choice.reason)
