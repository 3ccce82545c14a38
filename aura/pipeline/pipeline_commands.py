"""``aura pipeline run|list|show|plan``: the typed configs and one function per command."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, current_lang, num

M = Messages(
    "pipeline.command",
    {
        "bad_price": (
            "--price-per-hour debe ser 0 o más (euros por hora de dispositivo), no {value}.",
            "--price-per-hour must be 0 or more (euros per device-hour), not {value}.",
        ),
        "need_pipeline": (
            "Falta el pipeline: un nombre de 'aura pipeline list' o un archivo YAML.",
            "The pipeline is missing: a name from 'aura pipeline list' or a YAML file.",
        ),
        "need_output": (
            "Falta --output-dir: la carpeta del pipeline (una subcarpeta por etapa, pipeline.json y el informe).",
            "--output-dir is missing: the pipeline's folder (one subfolder per stage, pipeline.json and the report).",
        ),
        "bad_assume": (
            "--assume '{value}' no se entiende: escribe el nombre y la memoria de la GPU (\"H100 80GB\", "
            '"24GB") o "cpu".',
            '--assume \'{value}\' cannot be read: write the GPU\'s name and memory ("H100 80GB", "24GB") or "cpu".',
        ),
        "list_title": (
            "Pipelines incluidos (aura pipeline show NOMBRE para verlo):",
            "Shipped pipelines (aura pipeline show NAME to see one):",
        ),
        "plan_title": ("Plan de '{name}' en {hw} (nada se ejecuta):", "Plan of '{name}' on {hw} (nothing runs):"),
        "plan_valid": ("Las {n:etapa|etapas} son válidas.", "All {n:stage|stages} are valid."),
        "h_stage": ("etapa", "stage"),
        "h_command": ("comando", "command"),
        "h_auto": ("auto elige", "auto picks"),
        "h_budget": ("duración pedida", "length asked"),
        "h_tps": ("tokens/paso", "tokens/step"),
        "h_steps": ("pasos", "steps"),
        "h_tokens": ("tokens previstos", "planned tokens"),
        "h_estimate": ("estimación", "estimate"),
        "h_hours": ("horas asignadas", "hours allotted"),
        "no_estimate": ("sin estimación", "no estimate"),
        "plan_total": (
            "Tiempo estimado de las etapas con estimación: {time}; coste: {cost}.",
            "Estimated time of the stages with an estimate: {time}; cost: {cost}.",
        ),
        "plan_basis": (
            "Supuestos: el presupuesto de tiempo cuando WSD termina la etapa en él; si no, los tokens "
            "previstos por los FLOPs por token (6·N; LoRA 4·N; DPO 8·N; KTO 12·N; GRPO 8·N más 2·N por token "
            "muestreado al {gen} %) al {mfu} % del pico del dispositivo, lo que acabe antes; "
            "{cpt:carácter|caracteres} por token en los datos de ajuste fino; curación, tokenizador y datos: "
            "ritmos medidos por proceso (bench/bench_data_rates.py) cuando el tamaño de su entrada se "
            "conoce ya.",
            "Assumptions: the time budget when WSD ends the stage on it; else the planned tokens times "
            "the FLOPs per token (6·N; LoRA 4·N; DPO 8·N; KTO 12·N; GRPO 8·N plus 2·N per sampled token at {gen} %) "
            "at {mfu} % of the device's peak, whichever ends first; {cpt:character|characters} per token in "
            "fine-tuning data; curation, tokenizer and data: rates measured per process "
            "(bench/bench_data_rates.py) when their input's size is known now.",
        ),
        "hours_split": (
            "Reparto de {total} h: {parts}; margen {spare} h.",
            "Split of {total} h: {parts}; {spare} h spare.",
        ),
        "hours_over": (
            "La etapa {stage} tiene {hours} h asignadas, pero su estimación es {est}.",
            "Stage {stage} is allotted {hours} h, but its estimate is {est}.",
        ),
        "no_cost": ("sin --price-per-hour", "no --price-per-hour"),
        "data_card": (
            "{stage}: datos {name} (licencia {licence}; {size}; {source}; leídos en streaming del hub; "
            "sin red: {fallback}).",
            "{stage}: data {name} (licence {licence}; {size}; {source}; streamed from the hub; offline: {fallback}).",
        ),
        "data_ends": (
            "{stage}: los datos son {examples:ejemplo|ejemplos} de entrenamiento (tokens: ~{tokens}); "
            "{epochs:época|épocas} llenan el {pct} % del presupuesto de {budget} h y la etapa acaba ahí.",
            "{stage}: the data is {examples:training example|training examples} (tokens: ~{tokens}); "
            "{epochs:epoch|epochs} fill {pct} % of the {budget} h budget and the stage ends there.",
        ),
        "data_fills": (
            "{stage}: los datos son {examples:ejemplo|ejemplos} de entrenamiento (tokens: ~{tokens}); el "
            "presupuesto de {budget} h lee ~{read:ejemplo|ejemplos} (épocas: {epochs}){repeat}.",
            "{stage}: the data is {examples:training example|training examples} (tokens: ~{tokens}); the "
            "{budget} h budget reads ~{read:example|examples} (epochs: {epochs}){repeat}.",
        ),
        "data_steps": (
            "{stage}: los datos son {examples:ejemplo|ejemplos} de entrenamiento (tokens: ~{tokens}); los "
            "pasos previstos leen ~{read:ejemplo|ejemplos} (épocas: {epochs}).",
            "{stage}: the data is {examples:training example|training examples} (tokens: ~{tokens}); the "
            "planned steps read ~{read:example|examples} (epochs: {epochs}).",
        ),
        "repeats": (" (los datos se repiten)", " (the data repeats)"),
        "no_fallback": ("sin alternativa: la etapa falla", "no fallback: the stage fails"),
        "plan_one_node": (
            "Con {n:nodo|nodos} (NNODES): en varios nodos, exporta en cada uno NNODES, NODE_RANK, "
            "MASTER_ADDR, MASTER_PORT y GPUS_PER_NODE (los de aura launch) y ejecuta el mismo aura "
            "pipeline run.",
            "On {n:node|nodes} (NNODES): on several nodes, export NNODES, NODE_RANK, MASTER_ADDR, "
            "MASTER_PORT and GPUS_PER_NODE (aura launch's) on each one and run the same aura pipeline "
            "run.",
        ),
    },
)


@dataclass
class PipelineRunConfig:
    pipeline: str = arg(
        "",
        es="Pipeline: nombre de uno incluido (aura pipeline list) o archivo YAML.",
        en="Pipeline: the name of a shipped one (aura pipeline list) or a YAML file.",
        positional=True,
    )
    output_dir: str = arg(
        "",
        es="Carpeta del pipeline: una subcarpeta por etapa, pipeline.json e informe.",
        en="The pipeline's folder: one subfolder per stage, pipeline.json and the report.",
        short="-o",
    )
    scale: float = arg(
        1.0,
        es="Escala los presupuestos del pipeline (horas, pasos, tokens, documentos) por este "
        "factor, p. ej. 0.001 para probarlo en minutos; --set sigue exacto.",
        en="Scale the pipeline's budgets (hours, steps, tokens, documents) by this factor, e.g. 0.001 "
        "to try it in minutes; --set stays exact.",
    )
    set: list[str] = arg(
        [],
        es="Cambia una opción de una etapa: ETAPA.CLAVE=VALOR (se puede repetir).",
        en="Change one option of a stage: STAGE.KEY=VALUE (can be repeated).",
        metavar="STAGE.KEY=VALUE",
    )
    price_per_hour: float | None = arg(
        None,
        es="Precio por hora de dispositivo en euros, para el coste del informe.",
        en="Price per device-hour in euros, for the report's cost.",
    )

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
    name: str = arg(
        "",
        es="Nombre del pipeline incluido (aura pipeline list).",
        en="Name of the shipped pipeline (aura pipeline list).",
        positional=True,
    )

    def __post_init__(self):
        if not self.name:
            raise AuraError(M("need_pipeline"))


@dataclass
class PipelinePlanConfig:
    pipeline: str = arg(
        "",
        es="Pipeline: nombre de uno incluido o archivo YAML.",
        en="Pipeline: the name of a shipped one or a YAML file.",
        positional=True,
    )
    output_dir: str = arg(
        "runs/pipeline",
        es="Carpeta que tendría el pipeline (solo para los comandos).",
        en="Folder the pipeline would use (only for the commands shown).",
        short="-o",
    )
    set: list[str] = arg(
        [],
        es="Cambia una opción de una etapa: ETAPA.CLAVE=VALOR.",
        en="Change one option of a stage: STAGE.KEY=VALUE.",
        metavar="STAGE.KEY=VALUE",
    )
    scale: float = arg(
        1.0,
        es="Escala los presupuestos del pipeline por este factor (como en aura pipeline run).",
        en="Scale the pipeline's budgets by this factor (as in aura pipeline run).",
    )
    assume: str = arg(
        "",
        es='Planifica para otro hardware, como aura doctor --assume: "H100 80GB", "24GB", "cpu".',
        en='Plan for other hardware, as aura doctor --assume: "H100 80GB", "24GB", "cpu".',
    )
    price_per_hour: float | None = arg(
        None, es="Precio por hora de dispositivo en euros.", en="Price per device-hour in euros."
    )

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

    pipeline = spec.load(cfg.pipeline, overrides=cfg.set, scale=cfg.scale)
    return run_pipeline(
        pipeline,
        Path(cfg.output_dir),
        price=cfg.price_per_hour,
        rerun=run_argv(cfg.pipeline, cfg.output_dir, cfg.set, cfg.price_per_hour, scale=cfg.scale),
    )


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
    for field, label in (
        ("time_budget", "time_budget (h)"),
        ("max_steps", "max_steps"),
        ("max_tokens", "max_tokens"),
        ("epochs", "epochs"),
    ):
        v = getattr(c, field, None)
        if v not in (None, 0, "", "0"):
            parts.append(f"{label}={v}")
    return ", ".join(parts) or "–"


def plan_pipeline(pipeline, info) -> dict:
    """Each stage's plan (``aura.pipeline.estimate.StagePlan``) by name, in order."""
    from aura.pipeline.estimate import plan_stage

    plans: dict = {}
    for s in pipeline.stages:
        plans[s.name] = plan_stage(
            s.key, s.cfg, info, earlier=dict(plans), refs=s.refs, launch=s.launch, nnodes=s.nnodes
        )
    return plans


def _duration(seconds: float) -> str:
    return console.format_duration(seconds) if seconds >= 60 else f"{num(max(seconds, 1), '.0f')} s"


def _hours(h: float) -> str:
    return num(h, ".3g")


def _data_lines(stage, p) -> list[str]:
    """A fine-tuning stage's data: the hub dataset's card (licence, size, source, offline fallback) and how
    much of the stage's budget (or planned steps) the data fills."""
    from aura.data.hub_datasets import card
    from aura.pipeline.estimate import CHARS_PER_TOKEN, budget_seconds, data_size, hub_data_size

    if stage.key != ("finetune",) or not p.examples or not p.read:
        return []
    cfg, lines = stage.cfg, []
    known = card(cfg.data)
    if known is not None:
        fallback = cfg.data_fallback or M("no_fallback")
        lines.append(
            "    "
            + M(
                "data_card",
                stage=stage.name,
                name=known.name,
                licence=known.licence,
                size=known.size_text,
                source=known.source,
                fallback=fallback,
            )
        )
    size = data_size(cfg.data) or hub_data_size(cfg.data)
    tok = size[1] * p.examples / max(size[0], 1) / CHARS_PER_TOKEN
    tokens = f"{num(tok / 1e6, '.3g')} M" if tok >= 1e6 else num(int(tok), ",")
    epochs = p.read / p.examples
    budget = budget_seconds(cfg)
    if budget and p.seconds and p.seconds < budget * 0.999:
        lines.append(
            "    "
            + M(
                "data_ends",
                stage=stage.name,
                examples=p.examples,
                tokens=tokens,
                epochs=round(epochs),
                pct=num(100 * p.seconds / budget, ".2g"),
                budget=_hours(budget / 3600),
            )
        )
    elif budget:
        lines.append(
            "    "
            + M(
                "data_fills",
                stage=stage.name,
                examples=p.examples,
                tokens=tokens,
                budget=_hours(budget / 3600),
                read=p.read,
                epochs=num(epochs, ".2g"),
                repeat=M("repeats") if epochs > 1 else "",
            )
        )
    else:
        lines.append(
            "    "
            + M(
                "data_steps",
                stage=stage.name,
                examples=p.examples,
                tokens=tokens,
                read=p.read,
                epochs=num(epochs, ".2g"),
            )
        )
    return lines


def pipeline_plan(cfg: PipelinePlanConfig) -> int:
    from aura.models.hardware import assumed_hardware, detect
    from aura.pipeline import comm_advice, nodes, spec
    from aura.pipeline.estimate import ASSUMED_MFU, CHARS_PER_TOKEN, GENERATION_MFU
    from aura.pipeline.runner import equivalent_command

    pipeline = spec.resolve(
        spec.load(cfg.pipeline, overrides=cfg.set, scale=cfg.scale), Path(cfg.output_dir).expanduser().absolute()
    )
    info = assumed_hardware(cfg.assume) if cfg.assume else detect()
    hw = f"{info.name} ({info.count} × {num(info.memory_bytes / 1024**3, '.0f')} GiB)"
    print(M("plan_title", name=pipeline.path.stem, hw=hw))
    plans = plan_pipeline(pipeline, info)
    rows, total = [], 0.0
    for s in pipeline.stages:
        p = plans[s.name]
        total += p.seconds or 0.0
        allotted = pipeline.hours.get(s.name)
        rows.append(
            [
                s.name,
                _budget(s.cfg),
                p.auto or "–",
                num(p.tokens_per_step, ",") if p.tokens_per_step else "–",
                num(p.steps, ",") if p.steps else "–",
                num(p.tokens, ",") if p.tokens else "–",
                _duration(p.seconds) if p.seconds else M("no_estimate"),
                _hours(allotted) if allotted is not None else "–",
            ]
        )
        print(f"  {s.name}: {equivalent_command(s, launched=True)}")
        for line in _data_lines(s, p) + [f"    {s.name}: {x}" for x in (p.size.lines() if p.size else [])]:
            print(line)
        if p.size and not p.size.sensible:
            console.warn(p.size.warning())
        if s.comm is not None:
            print(comm_advice.plan_line(s, info))
    lay = nodes.layout(pipeline)
    if lay.multi:
        print(nodes.describe(lay))
    elif any(s.launch is not None for s in pipeline.stages):
        print(M("plan_one_node", n=lay.nnodes))
    headers = [
        M("h_stage"),
        M("h_budget"),
        M("h_auto"),
        M("h_tps"),
        M("h_steps"),
        M("h_tokens"),
        M("h_estimate"),
        M("h_hours"),
    ]
    if not pipeline.hours:
        headers, rows = headers[:-1], [r[:-1] for r in rows]
    console.table("", headers, rows)
    cost = (
        (num(total / 3600 * info.count * cfg.price_per_hour, ".2f") + " €")
        if cfg.price_per_hour is not None
        else M("no_cost")
    )
    print(M("plan_total", time=console.format_duration(total), cost=cost))
    print(M("plan_basis", mfu=round(ASSUMED_MFU * 100), gen=round(GENERATION_MFU * 100), cpt=round(CHARS_PER_TOKEN)))
    if pipeline.hours:
        parts = [f"{name} {_hours(h)} h" for name, h in pipeline.hours.items() if name != "total"]
        assigned = sum(h for name, h in pipeline.hours.items() if name != "total")
        whole = pipeline.hours.get("total", assigned)
        print(M("hours_split", total=_hours(whole), parts=", ".join(parts), spare=_hours(whole - assigned)))
        for name, h in pipeline.hours.items():
            est = plans[name].seconds if name in plans else None
            if est is not None and est > h * 3600 * 1.001:
                console.warn(M("hours_over", stage=name, hours=_hours(h), est=console.format_duration(est)))
    console.success(M("plan_valid", n=len(pipeline.stages)))
    return 0
