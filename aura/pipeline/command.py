"""``aura pipeline run|list|show|plan``: the typed configs and one function per command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, current_lang, num

M = Messages("pipeline.command", {
    "bad_price": ("--price-per-hour debe ser 0 o más (euros por hora de dispositivo), no {value}.",
                  "--price-per-hour must be 0 or more (euros per device-hour), not {value}."),
    "need_pipeline": ("Falta el pipeline: un nombre de 'aura pipeline list' o un archivo YAML.",
                      "The pipeline is missing: a name from 'aura pipeline list' or a YAML file."),
    "need_output": ("Falta --output-dir: la carpeta del pipeline (una subcarpeta por etapa, pipeline.json y "
                    "el informe).",
                    "--output-dir is missing: the pipeline's folder (one subfolder per stage, pipeline.json and "
                    "the report)."),
    "bad_assume": ("--assume '{value}' no se entiende: escribe el nombre y la memoria de la GPU (\"H100 80GB\", "
                   "\"24GB\") o \"cpu\".",
                   "--assume '{value}' cannot be read: write the GPU's name and memory (\"H100 80GB\", \"24GB\") "
                   "or \"cpu\"."),
    "list_title": ("Pipelines incluidos (aura pipeline show NOMBRE para verlo):",
                   "Shipped pipelines (aura pipeline show NAME to see one):"),
    "plan_title": ("Plan de '{name}' en {hw} (nada se ejecuta):", "Plan of '{name}' on {hw} (nothing runs):"),
    "plan_valid": ("Las {n:etapa|etapas} son válidas.", "All {n:stage|stages} are valid."),
    "h_stage": ("etapa", "stage"), "h_command": ("comando", "command"), "h_auto": ("auto elige", "auto picks"),
    "h_budget": ("duración pedida", "length asked"), "h_tps": ("tokens/paso", "tokens/step"),
    "h_steps": ("pasos", "steps"), "h_tokens": ("tokens previstos", "planned tokens"), "h_estimate": ("estimación", "estimate"),
    "plan_total": ("Tiempo estimado de las etapas de entrenamiento: {time}; coste: {cost}. (Presupuesto de "
                   "tiempo con WSD, o 6·N FLOPs por token al 40 % del pico del dispositivo.)",
                   "Estimated time of the training stages: {time}; cost: {cost}. (The time budget with WSD, or "
                   "6·N FLOPs per token at 40 % of the device's peak.)"),
    "no_cost": ("sin --price-per-hour", "no --price-per-hour"),
    "plan_one_node": ("Con {n:nodo|nodos} (NNODES): en varios nodos, exporta en cada uno NNODES, NODE_RANK, "
                      "MASTER_ADDR, MASTER_PORT y GPUS_PER_NODE (los de aura launch) y ejecuta el mismo aura "
                      "pipeline run.",
                      "On {n:node|nodes} (NNODES): on several nodes, export NNODES, NODE_RANK, MASTER_ADDR, "
                      "MASTER_PORT and GPUS_PER_NODE (aura launch's) on each one and run the same aura pipeline "
                      "run."),
})


@dataclass
class PipelineRunConfig:
    pipeline: str = arg("", es="Pipeline: nombre de uno incluido (aura pipeline list) o archivo YAML.",
                        en="Pipeline: the name of a shipped one (aura pipeline list) or a YAML file.",
                        positional=True)
    output_dir: str = arg("", es="Carpeta del pipeline: una subcarpeta por etapa, pipeline.json e informe.",
                          en="The pipeline's folder: one subfolder per stage, pipeline.json and the report.",
                          short="-o")
    set: list[str] = arg([], es="Cambia una opción de una etapa: ETAPA.CLAVE=VALOR (se puede repetir).",
                         en="Change one option of a stage: STAGE.KEY=VALUE (can be repeated).",
                         metavar="STAGE.KEY=VALUE")
    price_per_hour: float | None = arg(None, es="Precio por hora de dispositivo en euros, para el coste del "
                                                "informe.",
                                       en="Price per device-hour in euros, for the report's cost.")

    def __post_init__(self):
        if not self.pipeline:
            raise AuraError(M("need_pipeline"))
        if not self.output_dir:
            raise AuraError(M("need_output"))
        if self.price_per_hour is not None and self.price_per_hour < 0:
            raise AuraError(M("bad_price", value=self.price_per_hour))


@dataclass
class PipelineListConfig:
    pass


@dataclass
class PipelineShowConfig:
    name: str = arg("", es="Nombre del pipeline incluido (aura pipeline list).",
                    en="Name of the shipped pipeline (aura pipeline list).", positional=True)

    def __post_init__(self):
        if not self.name:
            raise AuraError(M("need_pipeline"))


@dataclass
class PipelinePlanConfig:
    pipeline: str = arg("", es="Pipeline: nombre de uno incluido o archivo YAML.",
                        en="Pipeline: the name of a shipped one or a YAML file.", positional=True)
    output_dir: str = arg("runs/pipeline", es="Carpeta que tendría el pipeline (solo para los comandos).",
                          en="Folder the pipeline would use (only for the commands shown).", short="-o")
    set: list[str] = arg([], es="Cambia una opción de una etapa: ETAPA.CLAVE=VALOR.",
                         en="Change one option of a stage: STAGE.KEY=VALUE.", metavar="STAGE.KEY=VALUE")
    assume: str = arg("", es="Planifica para otro hardware, como aura doctor --assume: \"H100 80GB\", \"24GB\", "
                             "\"cpu\".",
                      en="Plan for other hardware, as aura doctor --assume: \"H100 80GB\", \"24GB\", \"cpu\".")
    price_per_hour: float | None = arg(None, es="Precio por hora de dispositivo en euros.",
                                       en="Price per device-hour in euros.")

    def __post_init__(self):
        if not self.pipeline:
            raise AuraError(M("need_pipeline"))
        if self.price_per_hour is not None and self.price_per_hour < 0:
            raise AuraError(M("bad_price", value=self.price_per_hour))
        if self.assume:
            from aura.models.hardware import assumed_hardware

            try:
                assumed_hardware(self.assume)
            except ValueError:
                raise AuraError(M("bad_assume", value=self.assume)) from None


def pipeline_run(cfg: PipelineRunConfig) -> int:
    from aura.pipeline import spec
    from aura.pipeline.runner import run_argv, run_pipeline

    pipeline = spec.load(cfg.pipeline, overrides=cfg.set)
    return run_pipeline(pipeline, Path(cfg.output_dir), price=cfg.price_per_hour,
                        rerun=run_argv(cfg.pipeline, cfg.output_dir, cfg.set, cfg.price_per_hour))


def pipeline_list(cfg: PipelineListConfig) -> int:
    import yaml

    from aura.pipeline.spec import shipped

    print(M("list_title"))
    ships = shipped()
    width = max((len(n) for n in ships), default=0)
    for name, path in ships.items():
        desc = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("description") or {}
        line = desc.get(current_lang(), desc.get("en", "")) if isinstance(desc, dict) else str(desc)
        print(f"  {name.ljust(width)}  {' '.join(str(line).split())}")
    return 0


def pipeline_show(cfg: PipelineShowConfig) -> int:
    from aura.pipeline.spec import find

    print(find(cfg.name).read_text(encoding="utf-8"), end="")
    return 0


def _budget(c) -> str:
    parts = []
    for field, label in (("time_budget", "time_budget (h)"), ("max_steps", "max_steps"), ("max_tokens", "max_tokens"),
                         ("epochs", "epochs")):
        v = getattr(c, field, None)
        if v not in (None, 0, "", "0"):
            parts.append(f"{label}={v}")
    return ", ".join(parts) or "–"


def pipeline_plan(cfg: PipelinePlanConfig) -> int:
    from aura.models.hardware import assumed_hardware, detect
    from aura.pipeline import comm, nodes, spec
    from aura.pipeline.plan import plan_stage
    from aura.pipeline.runner import equivalent_command

    pipeline = spec.resolve(spec.load(cfg.pipeline, overrides=cfg.set), Path(cfg.output_dir).expanduser().absolute())
    info = assumed_hardware(cfg.assume) if cfg.assume else detect()
    hw = f"{info.name} ({info.count} × {num(info.memory_bytes / 1024 ** 3, '.0f')} GiB)"
    print(M("plan_title", name=pipeline.path.stem, hw=hw))
    rows, total = [], 0.0
    for s in pipeline.stages:
        p = plan_stage(s.key, s.cfg, info)
        total += p.seconds or 0.0
        rows.append([s.name, _budget(s.cfg), p.auto or "–", num(p.tokens_per_step, ",") if p.tokens_per_step else "–",
                     num(p.steps, ",") if p.steps else "–", num(p.tokens, ",") if p.tokens else "–",
                     console.format_duration(p.seconds) if p.seconds else "–"])
        print(f"  {s.name}: {equivalent_command(s, launched=True)}")
        if s.comm is not None:
            print(comm.plan_line(s, info))
    lay = nodes.layout(pipeline)
    if lay.multi:
        print(nodes.describe(lay))
    elif any(s.launch is not None for s in pipeline.stages):
        print(M("plan_one_node", n=lay.nnodes))
    console.table("", [M("h_stage"), M("h_budget"), M("h_auto"), M("h_tps"), M("h_steps"), M("h_tokens"),
                       M("h_estimate")], rows)
    cost = (num(total / 3600 * info.count * cfg.price_per_hour, ".2f") + " €") if cfg.price_per_hour is not None \
        else M("no_cost")
    print(M("plan_total", time=console.format_duration(total), cost=cost))
    console.success(M("plan_valid", n=len(pipeline.stages)))
    return 0



