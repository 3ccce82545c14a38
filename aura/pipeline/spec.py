"""A pipeline file read and checked: every stage's options through its command's typed config.

A pipeline is a YAML mapping with ``stages``, an ordered list; each stage has ``name``, ``command`` (as
typed after ``aura``: ``pretrain``, ``export gguf``) and ``options``, exactly the keys of that command's
``--config`` file. A text option whose value is ``STAGE`` or ``STAGE.PATH`` (an earlier stage's name) is
that stage's folder, ``DIR/STAGE/PATH``; ``aura:NAME`` is a resource shipped with Aura
(``aura:corpus_es``). The runner sets every stage's ``output_dir`` to ``DIR/<stage>``.
Everything here runs before the first stage starts and writes nothing.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

from aura.core.commands import COMMANDS
from aura.core.config import coerce, fields_of, mapping_values, unwrap_optional
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "pipeline.spec",
    {
        "no_file": (
            "No existe el pipeline '{name}': ni es un archivo ni uno de los incluidos ({shipped}). "
            "'aura pipeline list' los muestra.",
            "There is no pipeline '{name}': neither a file nor a shipped one ({shipped}). "
            "'aura pipeline list' shows them.",
        ),
        "bad_yaml": ("{path} no es YAML válido: {err}", "{path} is not valid YAML: {err}"),
        "no_stages": (
            "{path} debe ser un diccionario con una lista 'stages' (cada etapa con name, command y options).",
            "{path} must be a mapping with a 'stages' list (each stage with name, command and options).",
        ),
        "bad_top": (
            "{path}: clave '{key}' desconocida arriba del todo. Claves válidas: {valid}.",
            "{path}: unknown top-level key '{key}'. Valid keys: {valid}.",
        ),
        "bad_stage": (
            "{where}: cada etapa es un diccionario con 'name', 'command' y 'options' (y opcionalmente "
            "'description'); sobra o falta '{key}'.",
            "{where}: each stage is a mapping with 'name', 'command' and 'options' (and optionally "
            "'description'); '{key}' is missing or extra.",
        ),
        "bad_name": (
            "{where}: el nombre '{name}' no sirve: usa minúsculas, cifras, '-' o '_' (es el nombre de su carpeta).",
            "{where}: the name '{name}' will not do: use lowercase letters, digits, '-' or '_' (it names its folder).",
        ),
        "dup_name": (
            "{where}: ya hay una etapa llamada '{name}'; cada etapa necesita su propio nombre.",
            "{where}: there is already a stage called '{name}'; each stage needs its own name.",
        ),
        "bad_command": (
            "{where}: 'aura {command}' no es un comando que pueda ser una etapa. Comandos posibles: {valid}.",
            "{where}: 'aura {command}' is not a command that can be a stage. Possible commands: {valid}.",
        ),
        "options_mapping": (
            "{where}: 'options' debe ser un diccionario clave: valor (las claves del --config del comando).",
            "{where}: 'options' must be a mapping of key: value (the keys of the command's --config).",
        ),
        "output_set": (
            "{where}: '{key}' lo pone el pipeline (la carpeta de la etapa, DIR/{stage}); quítalo.",
            "{where}: '{key}' is set by the pipeline (the stage's folder, DIR/{stage}); remove it.",
        ),
        "later_ref": (
            "{where}, opción '{key}': '{value}' se refiere a la etapa '{ref}', que se ejecuta después "
            "(o es esta misma). Una etapa solo puede usar las salidas de las anteriores.",
            "{where}, option '{key}': '{value}' refers to stage '{ref}', which runs later (or is this "
            "one). A stage can only use the outputs of earlier ones.",
        ),
        "no_resource": (
            "{where}, opción '{key}': Aura no incluye el recurso '{name}'. Recursos: {valid}.",
            "{where}, option '{key}': Aura ships no resource '{name}'. Resources: {valid}.",
        ),
        "invalid": ("{where}: {error}", "{where}: {error}"),
        "stage_where": (
            "{path}, línea {line}, etapa '{stage}' (aura {command})",
            "{path}, line {line}, stage '{stage}' (aura {command})",
        ),
        "launch_mapping": (
            "{where}: 'launch' debe ser un diccionario con las opciones de aura launch "
            "(gpus_per_node, nnodes, node_rank, master_addr, master_port...).",
            "{where}: 'launch' must be a mapping of aura launch's options (gpus_per_node, nnodes, "
            "node_rank, master_addr, master_port...).",
        ),
        "launch_not_training": (
            "{where}: 'launch' solo sirve para etapas de entrenamiento (pretrain, finetune): "
            "las demás se ejecutan una vez.",
            "{where}: 'launch' is only for training stages (pretrain, finetune): the others run once.",
        ),
        "bad_comm": (
            "{where}: 'comm' es 'auto' o un diccionario con opciones de aura check-dist ({valid}); sobra '{key}'.",
            "{where}: 'comm' is 'auto' or a mapping of aura check-dist options ({valid}); '{key}' is extra.",
        ),
        "comm_needs": (
            "{where}: 'comm: auto' mide el enlace con 'aura launch check-dist --model-preset' y aplica "
            "su consejo a un preentrenamiento lanzado: la etapa necesita 'command: pretrain', un "
            "bloque 'launch' y model_preset con nombre (no manual).",
            "{where}: 'comm: auto' measures the link with 'aura launch check-dist --model-preset' and "
            "applies its advice to a launched pretraining: the stage needs 'command: pretrain', a "
            "'launch' block and a named model_preset (not manual).",
        ),
        "comm_set": (
            "{where}: con 'comm: auto' el modo de comunicación lo decide la medida; quita '{key}' de "
            "options (o quita 'comm').",
            "{where}: with 'comm: auto' the measurement decides the communication mode; remove '{key}' "
            "from options (or remove 'comm').",
        ),
        "nodes_differ": (
            "{where}: esta etapa se lanza en {n:nodo|nodos} (nodo {rank}) y '{other}' en "
            "{n0:nodo|nodos} (nodo {rank0}): todas las etapas de varios nodos de un pipeline usan los "
            "mismos nodos.",
            "{where}: this stage is launched on {n:node|nodes} (node {rank}) and '{other}' on "
            "{n0:node|nodes} (node {rank0}): every multi-node stage of a pipeline uses the same nodes.",
        ),
        "launch_command": (
            "{where}: 'launch' no lleva 'command': el comando es el de la etapa.",
            "{where}: 'launch' takes no 'command': the command is the stage's.",
        ),
        "bad_set": (
            "--set '{item}': se esperaba ETAPA.CLAVE=VALOR (p. ej. --set pretrain.max_steps=100).",
            "--set '{item}': expected STAGE.KEY=VALUE (e.g. --set pretrain.max_steps=100).",
        ),
        "bad_hours": (
            "{path}: 'hours' reparte las horas del pipeline entre sus etapas: un diccionario con 'total' y "
            "nombres de etapa, cada uno un número de horas de 0 o más; '{key}' no sirve ({why}).",
            "{path}: 'hours' splits the pipeline's hours between its stages: a mapping of 'total' and stage "
            "names, each a number of hours of 0 or more; '{key}' will not do ({why}).",
        ),
        "hours_not_stage": ("no es una etapa; etapas: {valid}", "it is no stage; stages: {valid}"),
        "hours_not_number": ("no es un número de horas de 0 o más", "it is not a number of hours of 0 or more"),
        "hours_over": (
            "las etapas suman {sum} h, más que el total",
            "the stages add up to {sum} h, more than the total",
        ),
        "set_stage": (
            "--set '{item}': no hay ninguna etapa '{stage}'. Etapas: {valid}.",
            "--set '{item}': there is no stage '{stage}'. Stages: {valid}.",
        ),
        "set_launch": (
            "--set '{item}': la etapa '{stage}' no tiene bloque 'launch'; --set ETAPA.launch.CLAVE=VALOR "
            "solo cambia uno que exista.",
            "--set '{item}': stage '{stage}' has no 'launch' block; --set STAGE.launch.KEY=VALUE only "
            "changes one that exists.",
        ),
        "bad_scale": (
            "--scale {scale}: se esperaba un número mayor que 0 y como mucho 1 (0.001 = una milésima de los "
            "presupuestos del pipeline).",
            "--scale {scale}: expected a number above 0 and at most 1 (0.001 = a thousandth of the "
            "pipeline's budgets).",
        ),
    },
)

SHIPPED_DIR = Path(__file__).resolve().parent / "pipelines"
RESOURCES_DIR = Path(__file__).resolve().parent.parent / "resources"
OUTPUT_FIELDS = ("output_dir", "output", "outfile")  # where a command writes: the runner decides
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_MIXTURE = re.compile(r"^([\w-]+=[0-9.eE+-]+:)(.+)$")
_REWARD_MODEL = re.compile(r"^(model:)(.+?)(:[0-9.eE+-]+)?$")  # GRPO's --reward model:DIR[:WEIGHT]
_STAGE_KEYS = {"name", "command", "options", "description", "requires", "launch", "comm"}
_TOP_KEYS = {"stages", "description", "name", "launch", "hours"}
COMM_KEYS = {"step_seconds", "size_mb", "iters", "timeout", "backend"}  # aura check-dist's, for `comm: auto`
# What ``--scale F`` multiplies in every stage's options (as the YAML writes them; --set values stay exact): the
# budgets (hours of training, steps, tokens, documents). A budget of 0 (none) stays 0; a count never falls below
# 1. Step intervals (evaluation, checkpoints) are not scaled: a scaled stage takes far fewer steps than its
# budget's share suggests (the first steps, compilation and loading cost the same), and an evaluation every step
# would take most of its time; the evaluation at the end still runs.
SCALED_BUDGETS = ("time_budget", "max_steps", "max_tokens", "max_documents")


def _stage_commands() -> str:
    """The commands a stage may run (``Command.stage``), as the refusal lists them."""
    return ", ".join(" ".join(k) for k, c in COMMANDS.items() if c.stage)


@dataclass
class Stage:
    name: str
    key: tuple[str, ...]  # the command as typed after `aura`
    options: dict[str, Any]  # as written (after --set)
    line: int
    where: str  # "file, line N, stage 'x' (aura cmd)": every message about the stage starts with it
    refs: list[str] = field(default_factory=list)  # earlier stages whose outputs it reads
    cfg: Any = None  # the command's typed config, output_dir set
    cfg_cls: Any = None
    requires: list[str] = field(default_factory=list)  # Python modules without which the stage is skipped
    key_where: dict[str, str] = field(default_factory=dict)  # an option's own "file, line N, stage ..."
    launch: dict[str, Any] | None = None  # `aura launch`'s options: the stage runs under torchrun
    nnodes: int = 1  # the launch block's nodes (its value, else $NNODES): > 1 runs the stage on every node
    node_rank: int = 0  # this node's rank (the block's value, else $NODE_RANK)
    comm: dict[str, Any] | None = None  # `comm: auto`: check-dist's options; the link measured, its advice applied

    @property
    def command(self) -> str:
        return " ".join(self.key)


@dataclass
class Pipeline:
    source: str  # as the user named it: a shipped name or a file
    path: Path
    description: dict[str, str]
    stages: list[Stage]
    hours: dict[str, float] = field(default_factory=dict)  # how the pipeline's hours are split ("total" too)
    scale: float = 1.0  # --scale: the factor its budgets were multiplied by (1: as written)

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)


def shipped() -> dict[str, Path]:
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.yaml"))}


def find(name_or_file: str) -> Path:
    p = Path(name_or_file).expanduser()
    if p.is_file():
        return p
    ships = shipped()
    if name_or_file in ships:
        return ships[name_or_file]
    raise AuraError(M("no_file", name=name_or_file, shipped=", ".join(ships)))


def _stage_lines(text: str) -> list[tuple[int, dict[str, int]]]:
    """(line of each stage, {option key: its line}), 1-based, from the YAML's node marks."""
    import yaml

    out: list[tuple[int, dict[str, int]]] = []
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return out
    for k, v in root.value:
        if k.value == "stages" and isinstance(v, yaml.SequenceNode):
            for item in v.value:
                keys: dict[str, int] = {}
                if isinstance(item, yaml.MappingNode):
                    for sk, sv in item.value:
                        if sk.value == "options" and isinstance(sv, yaml.MappingNode):
                            keys = {ok.value: ok.start_mark.line + 1 for ok, _ in sv.value}
                out.append((item.start_mark.line + 1, keys))
    return out


def _parse_set(items: list[str]) -> list[tuple[str, str, Any]]:
    import yaml

    out = []
    for item in items:
        head, eq, raw = item.partition("=")
        stage, dot, key = head.partition(".")
        if not eq or not dot or not stage or not key:
            raise AuraError(M("bad_set", item=item))
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        out.append((stage.strip(), key.strip(), value))
    return out


def load(name_or_file: str, *, overrides: list[str] = (), scale: float = 1.0) -> Pipeline:
    """Read a pipeline (a file or a shipped name), scale its budgets by ``scale`` (``--scale``:
    ``SCALED_BUDGETS`` and the ``hours`` split) and apply ``--set STAGE.KEY=VALUE``
    (``STAGE.launch.KEY=VALUE`` for the stage's launch block); nothing resolved yet."""
    if not 0 < scale <= 1:
        raise AuraError(M("bad_scale", scale=scale))
    import yaml

    path = find(name_or_file)
    text = path.read_text(encoding="utf-8")
    shown = name_or_file if not Path(name_or_file).expanduser().is_file() else str(path)
    try:
        data = yaml.safe_load(text)
        lines = _stage_lines(text)
    except yaml.YAMLError as e:
        raise AuraError(M("bad_yaml", path=shown, err=e)) from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list) or not data["stages"]:
        raise AuraError(M("no_stages", path=shown))
    for key in data:
        if key not in _TOP_KEYS:
            raise AuraError(M("bad_top", path=shown, key=key, valid=", ".join(sorted(_TOP_KEYS))))
    desc = data.get("description") or {}
    desc = desc if isinstance(desc, dict) else {"es": str(desc), "en": str(desc)}
    stages: list[Stage] = []
    for i, raw in enumerate(data["stages"]):
        line, key_lines = lines[i] if i < len(lines) else (0, {})
        stages.append(
            _stage(raw, line=line, key_lines=key_lines, shown=shown, earlier=stages, default_launch=data.get("launch"))
        )
    names = [s.name for s in stages]
    hours = _hours(data.get("hours"), names, shown)
    if scale != 1:
        for stage in stages:
            stage.options = scaled_options(stage.options, scale)
        hours = {k: v * scale for k, v in hours.items()}
    for stage_name, key, value in _parse_set(list(overrides)):
        if stage_name not in names:
            raise AuraError(M("set_stage", item=f"{stage_name}.{key}", stage=stage_name, valid=", ".join(names)))
        target = stages[names.index(stage_name)]
        if key.startswith("launch."):
            if target.launch is None:
                raise AuraError(M("set_launch", item=f"{stage_name}.{key}", stage=stage_name))
            target.launch[key.removeprefix("launch.")] = value
        else:
            target.options[key] = value
    return Pipeline(
        source=name_or_file,
        path=path,
        description={k: str(v) for k, v in desc.items()},
        stages=stages,
        hours=hours,
        scale=scale,
    )


def _stage(raw, *, line: int, key_lines: dict[str, int], shown: str, earlier: list[Stage], default_launch) -> Stage:
    """One entry of ``stages`` checked: its keys, name, command (a stage command), options, launch and comm
    blocks, each refusal naming the file, line and stage."""
    where0 = f"{shown}, {line}"
    if not isinstance(raw, dict):
        raise AuraError(M("bad_stage", where=where0, key="name"))
    for key in ("name", "command"):
        if key not in raw:
            raise AuraError(M("bad_stage", where=where0, key=key))
    for key in raw:
        if key not in _STAGE_KEYS:
            raise AuraError(M("bad_stage", where=where0, key=key))
    name, command = str(raw["name"]), " ".join(str(raw["command"]).split())
    where = M("stage_where", path=shown, line=line, stage=name, command=command)
    if not _NAME.match(name):
        raise AuraError(M("bad_name", where=where, name=name))
    if any(s.name == name for s in earlier):
        raise AuraError(M("dup_name", where=where, name=name))
    key = tuple(command.split())
    if key not in COMMANDS or not COMMANDS[key].stage:
        raise AuraError(M("bad_command", where=where, command=command, valid=_stage_commands()))
    options = raw.get("options") or {}
    if not isinstance(options, dict):
        raise AuraError(M("options_mapping", where=where))
    launch = raw.get("launch", default_launch)
    if launch is not None and not isinstance(launch, dict):
        raise AuraError(M("launch_mapping", where=where))
    if "launch" in raw and not COMMANDS[key].run:  # training runs only (pretrain, finetune)
        raise AuraError(M("launch_not_training", where=where))
    if not COMMANDS[key].run:
        launch = None  # a pipeline-wide block launches its training stages only
    comm = raw.get("comm")
    if comm is not None:
        comm = {} if comm == "auto" else comm
        if not isinstance(comm, dict):
            raise AuraError(M("bad_comm", where=where, key=comm, valid=", ".join(sorted(COMM_KEYS))))
        for k in comm:
            if k not in COMM_KEYS:
                raise AuraError(M("bad_comm", where=where, key=k, valid=", ".join(sorted(COMM_KEYS))))
    requires = raw.get("requires") or []
    requires = [str(r) for r in (requires if isinstance(requires, list) else [requires])]
    key_where = {
        str(k): M("stage_where", path=shown, line=n, stage=name, command=command) for k, n in key_lines.items()
    }
    return Stage(
        name=name,
        key=key,
        options=dict(options),
        line=line,
        where=where,
        requires=requires,
        key_where=key_where,
        launch=dict(launch) if launch is not None else None,
        comm=dict(comm) if comm is not None else None,
    )


def scaled_options(options: dict[str, Any], scale: float) -> dict[str, Any]:
    """A stage's options with its budgets times ``scale`` (see ``SCALED_BUDGETS``): hours as a number, counts
    rounded up to at least 1, 0 (no budget) and what is not a number left as they are."""
    import math

    out = dict(options)
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name not in SCALED_BUDGETS or isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            continue
        out[key] = value * scale if name == "time_budget" else max(1, math.ceil(value * scale))
    return out


def _hours(raw, names: list[str], shown: str) -> dict[str, float]:
    """The ``hours`` mapping (``total`` and stage names -> hours), checked; {} when absent."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AuraError(M("bad_hours", path=shown, key="hours", why=M("hours_not_number")))
    out: dict[str, float] = {}
    for key, value in raw.items():
        if key != "total" and key not in names:
            raise AuraError(M("bad_hours", path=shown, key=key, why=M("hours_not_stage", valid=", ".join(names))))
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise AuraError(M("bad_hours", path=shown, key=key, why=M("hours_not_number")))
        out[str(key)] = float(value)
    stages_sum = sum(v for k, v in out.items() if k != "total")
    if "total" in out and stages_sum > out["total"] + 1e-9:
        raise AuraError(M("bad_hours", path=shown, key="total", why=M("hours_over", sum=round(stages_sum, 2))))
    return out


def _is_text_field(tp) -> tuple[bool, bool]:
    """(holds text or paths, is a list): only such fields can hold a reference (never a choice)."""
    tp, _ = unwrap_optional(tp)
    if get_origin(tp) in (list, tuple):
        inner, _ = unwrap_optional(get_args(tp)[0])
        return inner in (str, Path), True
    return tp in (str, Path), False


def _resolve_value(value, *, stage: Stage, key: str, earlier: list[str], later: list[str], out: Path):
    """A reference -> the folder it names (and the stage it comes from), anything else as is."""
    if not isinstance(value, str):
        return value, None
    mix = _MIXTURE.match(value)  # a weighted mixture entry, NAME=WEIGHT:DIR (pretrain --data)
    if mix:
        inner, ref = _resolve_value(mix.group(2), stage=stage, key=key, earlier=earlier, later=later, out=out)
        return mix.group(1) + inner, ref
    model = _REWARD_MODEL.match(value) if key == "reward" else None  # a reward model an earlier stage trains
    if model:
        inner, ref = _resolve_value(model.group(2), stage=stage, key=key, earlier=earlier, later=later, out=out)
        return model.group(1) + inner + (model.group(3) or ""), ref
    if value.startswith("aura:"):
        name = value[5:]
        path = RESOURCES_DIR / name
        if not name or not path.exists() or ".." in Path(name).parts:
            valid = ", ".join(sorted("aura:" + p.name for p in RESOURCES_DIR.iterdir() if not p.name.startswith(".")))
            raise AuraError(M("no_resource", where=stage.where, key=key, name=name, valid=valid))
        return str(path), None
    head, _, rest = value.partition(".")
    if head in earlier:
        return str(out / head / rest) if rest else str(out / head), head
    if head in later:
        raise AuraError(M("later_ref", where=stage.where, key=key, value=value, ref=head))
    return value, None


def resolve(pipeline: Pipeline, out: Path) -> Pipeline:
    """Every stage's options -> its command's typed config (``__post_init__``'s checks included), with
    references resolved to ``out/<stage>`` and ``output_dir`` set. Raises the first problem, naming the
    stage, its line and the key; writes nothing."""
    out = Path(out)
    names = [s.name for s in pipeline.stages]
    for i, stage in enumerate(pipeline.stages):
        cmd = COMMANDS[stage.key]
        cls = getattr(importlib.import_module(cmd.module), cmd.config)
        types = {f.name: tp for f, tp in fields_of(cls)}
        for key in stage.options:
            if str(key).replace("-", "_") in OUTPUT_FIELDS:
                raise AuraError(M("output_set", where=stage.where, key=key, stage=stage.name))
        resolved: dict[str, Any] = {}
        refs: list[str] = []
        for key, value in stage.options.items():
            text, is_list = _is_text_field(types.get(str(key).replace("-", "_")))
            if text:
                items = value if isinstance(value, list) else [value]
                done = []
                for item in items:
                    v, ref = _resolve_value(
                        item, stage=stage, key=str(key), earlier=names[:i], later=names[i:], out=out
                    )
                    done.append(v)
                    if ref and ref not in refs:
                        refs.append(ref)
                value = done if (is_list or isinstance(value, list)) else done[0]
            resolved[key] = value
        values: dict[str, Any] = {}
        for key, value in resolved.items():  # one at a time: a message names the option's own line
            where = stage.key_where.get(str(key), stage.where)
            values.update(
                mapping_values(
                    cls,
                    {key: value},
                    where=where,
                    explicit=("overwrite", "force"),
                    shown=lambda k, w=where: f"'{k}' ({w})",
                )
            )
        if cmd.output is None:  # a command that writes no folder is no stage (push, check-dist)
            raise AuraError(M("bad_command", where=stage.where, command=stage.command, valid=_stage_commands()))
        values[cmd.output] = coerce(cmd.output, types[cmd.output], str(out / stage.name))
        try:
            stage.cfg = cls(**values)
        except AuraError as e:
            raise AuraError(M("invalid", where=stage.where, error=str(e)), exit_code=e.exit_code) from None
        stage.cfg_cls, stage.refs = cls, refs
        if stage.launch is not None:
            _check_launch(stage)
        if stage.comm is not None:
            _check_comm(stage)
    multi = [s for s in pipeline.stages if s.nnodes > 1]
    for s in multi[1:]:
        if (s.nnodes, s.node_rank) != (multi[0].nnodes, multi[0].node_rank):
            raise AuraError(
                M(
                    "nodes_differ",
                    where=s.where,
                    n=s.nnodes,
                    rank=s.node_rank,
                    other=multi[0].name,
                    n0=multi[0].nnodes,
                    rank0=multi[0].node_rank,
                )
            )
    return pipeline


def _check_comm(stage: Stage) -> None:
    """``comm: auto``: a launched pretraining of a named preset, its communication left to the measurement,
    and check-dist's options through its own typed config."""
    from aura.models.presets import PRESETS

    cfg = stage.cfg
    if (
        stage.key != ("pretrain",)
        or stage.launch is None
        or (cfg.model_preset != "auto" and cfg.model_preset not in PRESETS)
    ):
        raise AuraError(M("comm_needs", where=stage.where))
    for key in ("ddp_comm", "local_steps"):
        if key in stage.options or key.replace("_", "-") in stage.options:
            raise AuraError(M("comm_set", where=stage.key_where.get(key, stage.where), key=key))
    cmd = COMMANDS[("check-dist",)]
    cls = getattr(importlib.import_module(cmd.module), cmd.config)
    values = mapping_values(cls, stage.comm, where=f"{stage.where}, comm")
    try:
        cls(**values)
    except AuraError as e:
        raise AuraError(M("invalid", where=stage.where, error=str(e)), exit_code=e.exit_code) from None
    stage.comm = values


def _check_launch(stage: Stage) -> None:
    """The stage's ``launch`` block through ``aura launch``'s own typed config (its environment defaults too)."""
    cmd = COMMANDS[("launch",)]
    cls = getattr(importlib.import_module(cmd.module), cmd.config)
    if "command" in stage.launch:
        raise AuraError(M("launch_command", where=stage.where))
    values = mapping_values(cls, stage.launch, where=f"{stage.where}, launch")
    try:
        job = cls(command=list(stage.key), **values)
    except AuraError as e:
        raise AuraError(M("invalid", where=stage.where, error=str(e)), exit_code=e.exit_code) from None
    stage.launch, stage.nnodes, stage.node_rank = values, job.nnodes, job.node_rank


def fingerprint_fields(cfg) -> dict[str, Any]:
    """``config_fields`` under the names a stage's fingerprint has always used: a renamed field keeps its old
    key (``overwrite`` of data prepare, export gguf... was ``force``), so a rename alone redoes no stage."""
    fields = config_fields(cfg)
    for f in dataclasses.fields(cfg):
        old = (f.metadata or {}).get("deprecated") or ()
        if old and f.name in fields:
            fields[old[0].lstrip("-").replace("-", "_")] = fields.pop(f.name)
    return fields


def config_fields(cfg) -> dict[str, Any]:
    """The config's values, JSON-friendly (paths as text)."""
    out = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        out[f.name] = (
            [str(x) if isinstance(x, Path) else x for x in v]
            if isinstance(v, list)
            else (str(v) if isinstance(v, Path) else v)
        )
    return out
