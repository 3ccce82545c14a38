"""What ``aura push`` uploads: the folder a user named, resolved to a model, an adapter or GGUF files, and
the upload plan as data (each file's path in the repository, in commit order, and each file left out
with its reason).

The plan is plain data so that it can be printed (``--dry-run``) and tested without a hub: the upload
itself (``aura.publish.push_command``) sends exactly ``plan.files`` in that order as one commit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from aura.core.atomic import TMP_PREFIX
from aura.core.errors import AuraError
from aura.core.files import check_safetensors
from aura.core.i18n import Messages
from aura.core.rundir import LOCK_FILE, MANIFEST_FILE, latest_checkpoint

M = Messages(
    "publish.plan",
    {
        "missing": (
            "{path}: no existe. Pasa la carpeta de una ejecución (con final/), de un modelo, de un "
            "adaptador o de un pipeline, o un archivo .gguf.",
            "{path}: no such file or folder. Pass a run folder (with final/), a model, adapter or pipeline "
            "folder, or a .gguf file.",
        ),
        "not_model": (
            "{path} no es una ejecución de Aura (run.json), ni un modelo (config.json), ni un adaptador "
            "(adapter_config.json), ni un pipeline (pipeline.json), ni un archivo .gguf.",
            "{path} is not an Aura run (run.json), a model (config.json), an adapter (adapter_config.json), "
            "a pipeline (pipeline.json) nor a .gguf file.",
        ),
        "no_final": (
            "{run} no tiene final/: la ejecución no terminó (estado: {status}). Pasa una carpeta de "
            "modelo: {options}, o reanuda la ejecución hasta el final.",
            "{run} has no final/: the run did not finish (status: {status}). Pass a model folder: "
            "{options}, or resume the run to the end.",
        ),
        "no_candidates": ("ninguna todavía", "none yet"),
        "pipeline_no_model": (
            "El pipeline {path} no tiene ninguna etapa de entrenamiento con final/ (etapas: "
            "{stages}). Termina el pipeline o pasa la carpeta final/ de una etapa.",
            "The pipeline {path} has no training stage with a final/ (stages: {stages}). Finish "
            "the pipeline or pass a stage's final/ folder.",
        ),
        "pickle_only": (
            "{path} solo tiene pesos en formato pickle ({files}); aura push sube solo safetensors, que "
            "no ejecutan código al cargarse. Conviértelos: cárgalo con transformers y guárdalo con "
            "save_pretrained(..., safe_serialization=True).",
            "{path} has pickle weights only ({files}); aura push uploads safetensors only, which run no "
            "code when loaded. Convert them: load it with transformers and save it with "
            "save_pretrained(..., safe_serialization=True).",
        ),
        "no_weights": (
            "{path} no tiene pesos (*.safetensors): no es un modelo completo.",
            "{path} has no weights (*.safetensors): it is not a complete model.",
        ),
        "not_gguf": (
            "--gguf {path}: no es un archivo GGUF (no empieza por 'GGUF'). Pasa un archivo escrito por "
            "aura export gguf.",
            "--gguf {path}: not a GGUF file (it does not start with 'GGUF'). Pass a file written by aura export gguf.",
        ),
        "same_name": (
            "Dos archivos se llamarían {name} en el repositorio: {a} y {b}. Renombra uno.",
            "Two files would be named {name} in the repository: {a} and {b}. Rename one.",
        ),
        "r_internal": ("archivo interno de Aura", "Aura's internal file"),
        "r_unfinished": ("escritura sin terminar", "unfinished write"),
        "r_lock": ("cerrojo", "lock"),
        "r_training_state": ("estado de entrenamiento (optimizador, RNG)", "training state (optimizer, RNG)"),
        "r_checkpoint": ("checkpoint", "checkpoint"),
        "r_pickle": ("pesos pickle (solo se sube safetensors)", "pickle weights (safetensors only)"),
        "r_card": ("se sustituye por la tarjeta generada", "replaced by the generated card"),
        "r_link": ("enlace simbólico", "symbolic link"),
        "r_hidden": ("archivo oculto", "hidden file"),
        "rewritten": (
            "copia con las rutas locales sustituidas por {base}",
            "a copy with local paths replaced by {base}",
        ),
    },
)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
TRAINING_STATE = {"optimizer.pt", "scaler.pt", "trainer_state.json", "rng", "scheduler.pt", MANIFEST_FILE}
_CHECKPOINT = re.compile(r"(checkpoint|interrupt)-(step|epoch)-\d+")
CARD = "README.md"
# Files Aura and peft write that name the base model (or the adapter) by its local path: uploaded as written,
# they would publish the trainer's folders, and peft would look for the base in a folder nobody else has.
BASE_FILES = ("adapter_config.json", "aura_adapter.json", "aura_merge.json")
BASE_KEYS = ("base_model_name_or_path", "base_model")


@dataclass
class Source:
    """The thing being published and the folders around it that describe it."""

    kind: str  # "model" | "adapter" | "gguf"
    model_dir: Path | None  # the folder whose files are uploaded (None: GGUF files only)
    run_dir: Path | None = None  # the run that wrote model_dir (run.json)
    pipeline_dir: Path | None = None  # the pipeline holding that run (pipeline.json)
    gguf: list[Path] = field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    local: Path
    path_in_repo: str
    bytes: int
    content: bytes | None = None  # uploaded instead of the file: a copy with local paths replaced


@dataclass
class UploadPlan:
    files: list[Entry]  # in commit order; the card README.md is added last by the command
    excluded: list[tuple[str, str]]  # (path relative to the model folder, reason key)


def _stages_in_order(pipeline_dir: Path) -> list[str]:
    try:
        state = json.loads((pipeline_dir / "pipeline.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    order = state.get("order") if isinstance(state, dict) else None
    return [s for s in order if isinstance(s, str)] if isinstance(order, list) else []


def _run_final(run_dir: Path) -> Path:
    final = run_dir / "final"
    if final.is_dir():
        return final
    from aura.watch.runs import describe_run

    run = describe_run(run_dir)
    options = [str(run_dir / "best")] if (run_dir / "best").is_dir() else []
    ckpt = latest_checkpoint(run_dir)
    options += [str(ckpt)] if ckpt else []
    raise AuraError(M("no_final", run=run_dir, status=run["status"], options=", ".join(options) or M("no_candidates")))


def resolve_source(path: str | Path, *, gguf: list[str] | tuple[str, ...] = ()) -> Source:
    """MODEL_DIR_OR_RUN -> Source. A run folder publishes its final/; a pipeline folder its last training
    stage's final/; a .gguf file is published alone."""
    p = Path(path).expanduser()
    if not p.exists():
        raise AuraError(M("missing", path=p))
    files = [check_gguf(Path(g).expanduser()) for g in gguf]
    if p.is_file():
        if p.suffix != ".gguf":
            raise AuraError(M("not_model", path=p))
        return Source("gguf", None, gguf=[check_gguf(p), *files])
    if (p / "pipeline.json").is_file():
        stages = _stages_in_order(p)
        runs = [p / s for s in stages if (p / s / "run.json").is_file() and (p / s / "final").is_dir()]
        if not runs:
            raise AuraError(M("pipeline_no_model", path=p, stages=", ".join(stages) or "-"))
        p = runs[-1]
    if (p / "run.json").is_file():
        run_dir, model_dir = p, _run_final(p)
    elif (p / "config.json").is_file() or (p / "adapter_config.json").is_file():
        model_dir = p
        run_dir = p.parent if (p.parent / "run.json").is_file() else None
    else:
        raise AuraError(M("not_model", path=p))
    kind = "model" if (model_dir / "config.json").is_file() else "adapter"
    if kind == "adapter" and not (model_dir / "adapter_config.json").is_file():
        raise AuraError(M("not_model", path=model_dir))
    check_weights(model_dir)
    pipeline = run_dir.parent if run_dir and (run_dir.parent / "pipeline.json").is_file() else None
    return Source(kind, model_dir, run_dir=run_dir, pipeline_dir=pipeline, gguf=files)


def check_gguf(path: Path) -> Path:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError:
        magic = b""
    if not path.is_file() or magic != b"GGUF":
        raise AuraError(M("not_gguf", path=path))
    return path


def check_weights(model_dir: Path) -> None:
    """safetensors present (and whole); a folder with pickle weights only is refused."""
    safe = sorted(model_dir.glob("*.safetensors"))
    if safe:
        for f in safe:
            check_safetensors(f)
        return
    pickles = sorted(f.name for f in model_dir.iterdir() if f.suffix in PICKLE_SUFFIXES and f.is_file())
    if pickles:
        raise AuraError(M("pickle_only", path=model_dir, files=", ".join(pickles)))
    raise AuraError(M("no_weights", path=model_dir))


def _reason(rel: Path, entry: Path) -> str | None:
    """Why a file of the model folder is not uploaded (a reason key), or None to upload it."""
    name = rel.parts[0]
    if entry.is_symlink():
        return "r_link"
    if name.startswith(TMP_PREFIX) or any(part.startswith(TMP_PREFIX) for part in rel.parts):
        return "r_unfinished"
    if name == LOCK_FILE or entry.name.endswith(".aura-lock"):
        return "r_lock"
    if name == ".aura-dir.json":
        return "r_internal"
    if name.startswith("."):
        return "r_hidden"
    if _CHECKPOINT.fullmatch(name):
        return "r_checkpoint"
    if name in TRAINING_STATE:
        return "r_training_state"
    if entry.suffix in PICKLE_SUFFIXES:
        return "r_pickle"
    if rel.as_posix() == CARD:
        return "r_card"
    return None


def _order(entry: Entry) -> tuple[int, str]:
    """Configuration and tokenizer files, then weights (each by name), then GGUF files as given, each followed
    by its Modelfile (the sort is stable)."""
    name = entry.path_in_repo
    if name.endswith((".gguf", ".Modelfile")):
        return 2, ""
    return (1 if name.endswith(".safetensors") else 0), name


def upload_plan(source: Source) -> UploadPlan:
    files: list[Entry] = []
    excluded: list[tuple[str, str]] = []
    if source.model_dir is not None:
        root = source.model_dir
        for entry in sorted(root.rglob("*")):
            if entry.is_dir() and not entry.is_symlink():
                continue
            rel = entry.relative_to(root)
            parent_excluded = any(rel.as_posix().startswith(e + "/") for e, _ in excluded)
            if parent_excluded:
                continue
            reason = _reason(rel, entry)
            if reason is None and entry.is_file():
                files.append(Entry(entry, rel.as_posix(), entry.stat().st_size))
            else:
                top = (
                    rel.parts[0]
                    if reason in ("r_checkpoint", "r_training_state") and len(rel.parts) > 1
                    else rel.as_posix()
                )
                if (top, reason) not in excluded:
                    excluded.append((top, reason or "r_hidden"))
    for g in source.gguf:
        files.append(Entry(g, g.name, g.stat().st_size))
        from aura.export.modelfile import modelfile_path

        mf = modelfile_path(g)
        if mf.is_file():
            files.append(Entry(mf, mf.name, mf.stat().st_size))
    seen: dict[str, Path] = {}
    for e in files:
        if e.path_in_repo in seen or e.path_in_repo == CARD:
            raise AuraError(M("same_name", name=e.path_in_repo, a=seen.get(e.path_in_repo, e.local), b=e.local))
        seen[e.path_in_repo] = e.local
    return UploadPlan(sorted(files, key=_order), excluded)


def _replace_paths(value, *, base: str, short, key: str = ""):
    """``value`` with every string that names an existing local path replaced (recursively): the base
    model's fields by ``base`` when there is one, any other by ``short(path)``."""
    if isinstance(value, dict):
        return {k: _replace_paths(v, base=base, short=short, key=k) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_paths(v, base=base, short=short, key=key) for v in value]
    if isinstance(value, str) and value and ("/" in value or "\\" in value) and Path(value).expanduser().exists():
        return base if key in BASE_KEYS and base else short(value)
    return value


def without_local_paths(plan: UploadPlan, *, base: str, short) -> UploadPlan:
    """The plan with the files of ``BASE_FILES`` uploaded as copies whose local paths are replaced
    (``_replace_paths``); the files on disk are not touched."""
    files = []
    for e in plan.files:
        data = None
        if e.path_in_repo in BASE_FILES:
            try:
                data = json.loads(e.local.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                data = None
        if data is not None:
            new = _replace_paths(data, base=base, short=short)
            if new != data:
                content = (json.dumps(new, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
                e = Entry(e.local, e.path_in_repo, len(content), content)
        files.append(e)
    return UploadPlan(files, plan.excluded)
