"""``TrainArgs``: the training flags shared by ``aura pretrain`` and ``aura finetune``.

Fields a preset (or ``auto``) may set default to ``None``; ``explicit_fields(cfg)`` tells which the user
gave, and ``with_defaults(cfg, **preset_values)`` fills the rest, so an explicit flag always wins over
a preset value. ``resolve_steps`` turns --epochs / --max-steps / --max-tokens into a number of
optimizer steps; the LR schedule, a pure function of the step, is ``aura.train.optim.schedule``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.optim.schedule import SCHEDULES, Schedule, schedule_for

M = Messages(
    "train_args",
    {
        "positive": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
        "non_negative": (
            "--{flag} no puede ser negativo (recibido: {value}).",
            "--{flag} cannot be negative (got: {value}).",
        ),
        "min_lr": (
            "--min-lr ({min_lr}) no puede ser mayor que --learning-rate ({lr}).",
            "--min-lr ({min_lr}) cannot be greater than --learning-rate ({lr}).",
        ),
        "cooldown": (
            "--cooldown-fraction debe estar en [0, 1) (recibido: {value}): es la parte final de la ejecución "
            "que enfría la tasa.",
            "--cooldown-fraction must be in [0, 1) (got: {value}): it is the final share of the run that cools "
            "the learning rate down.",
        ),
        "beta": ("--{flag} debe estar en [0, 1) (recibido: {value}).", "--{flag} must be in [0, 1) (got: {value})."),
        "bad_suite": (
            "--eval-suite {suite} no existe; la batería de Aura es aura-es.",
            "--eval-suite {suite} does not exist; Aura's suite is aura-es.",
        ),
        "suite_interval": (
            "--eval-suite {suite} necesita --eval-suite-interval N (pasos entre evaluaciones).",
            "--eval-suite {suite} needs --eval-suite-interval N (steps between evaluations).",
        ),
        "local_steps": (
            "--local-steps debe ser al menos 1 (recibido: {value}): son los pasos de cada proceso entre "
            "dos sincronizaciones. Para sincronizar en cada paso, quita --local-steps (DDP).",
            "--local-steps must be at least 1 (got: {value}): it is the number of steps each rank takes "
            "between two synchronisations. To synchronise every step, drop --local-steps (DDP).",
        ),
        "powersgd_warmup": (
            "--powersgd-warmup debe ser al menos 2 (recibido: {value}): DDP reorganiza sus buckets "
            "tras el primer paso y PowerSGD solo puede empezar después.",
            "--powersgd-warmup must be at least 2 (got: {value}): DDP rebuilds its buckets after the "
            "first step and PowerSGD can only start after that.",
        ),
        "local_and_hook": (
            "--local-steps no usa DDP, así que --ddp-comm {mode} no tendría efecto: elige uno de los dos "
            "(--local-steps para los enlaces más lentos).",
            "--local-steps does not use DDP, so --ddp-comm {mode} would have no effect: pick one of the "
            "two (--local-steps for the slowest links).",
        ),
        "comm_deepspeed": (
            "{flag} no funciona con --deepspeed (DeepSpeed hace su propia comunicación): quita uno de los dos.",
            "{flag} does not work with --deepspeed (DeepSpeed does its own communication): drop one of the two.",
        ),
        "comm_fsdp": (
            "Con --ddp-comm {mode} se comprime el all-reduce de DDP, que FSDP2 no usa: quita --ddp-comm o "
            "usa --strategy ddp.",
            "With --ddp-comm {mode}, DDP's all-reduce is compressed, which FSDP2 does not use: drop "
            "--ddp-comm or use --strategy ddp.",
        ),
        "warmup_too_long": (
            "--warmup-steps ({warmup}) es mayor o igual que el total de pasos ({total}).",
            "--warmup-steps ({warmup}) is not smaller than the total number of steps ({total}).",
        ),
    },
)

Precision = Literal["auto", "fp32", "fp16", "bf16"]


@dataclass
class TrainArgs:
    """Optimisation, schedule, precision, cadence and resume flags (shared by pretrain and finetune)."""

    output_dir: Path = arg(
        Path("runs/aura"),
        es="Directorio de la ejecución (checkpoints, logs, final/).",
        en="Run directory (checkpoints, logs, final/).",
        short="-o",
    )
    batch_size: int | None = arg(
        None,
        es="Secuencias por micro-lote y proceso (por defecto: el preset).",
        en="Sequences per micro-batch and process (default: the preset's).",
    )
    gradient_accumulation_steps: int | None = arg(
        None,
        es="Micro-lotes acumulados por paso de optimización (por defecto: el preset).",
        en="Micro-batches accumulated per optimizer step (default: the preset's).",
    )
    learning_rate: float | None = arg(
        None,
        es="Tasa de aprendizaje máxima (por defecto: la del preset).",
        en="Peak learning rate (default: the preset's).",
        short="--lr",
    )
    min_lr: float | None = arg(
        None,
        es="Tasa final (por defecto: 10 % de la máxima con cosine, 0 con wsd).",
        en="Final learning rate (default: 10 % of the peak with cosine, 0 with wsd).",
    )
    warmup_steps: int | None = arg(
        None,
        es="Pasos de calentamiento lineal (por defecto: 3 % del total).",
        en="Linear warm-up steps (default: 3 % of all steps).",
    )
    lr_schedule: str | None = arg(
        None,
        choices=SCHEDULES,
        es="Forma de la tasa tras el calentamiento: cosine (coseno hasta --min-lr) o wsd "
        "(estable y enfriamiento 1-sqrt al final; sin longitud fija, ver "
        "--cooldown-fraction y --time-budget). Por defecto, la del preset: wsd en los "
        "qwen3-*, cosine en los demás y en el fine-tuning (docs/training.md).",
        en="Learning-rate shape after the warm-up: cosine (down to --min-lr) or wsd "
        "(stable, then a 1-sqrt cooldown at the end; no fixed length, see "
        "--cooldown-fraction and --time-budget). Default: the preset's: wsd for "
        "qwen3-*, cosine for the others and for fine-tuning (docs/training.en.md).",
    )
    cooldown_fraction: float = arg(
        0.2,
        es="Con --lr-schedule wsd: fracción final de los pasos (o de --time-budget) dedicada al enfriamiento.",
        en="With --lr-schedule wsd: final share of the steps (or of --time-budget) spent cooling down.",
    )
    weight_decay: float = arg(
        0.1,
        es="Weight decay desacoplado (AdamW y Muon; solo matrices: no se aplica a normas, sesgos ni embeddings).",
        en="Decoupled weight decay (AdamW and Muon; matrices only: not applied to norms, biases or embeddings).",
    )
    adam_beta1: float = arg(0.9, es="beta1 de AdamW.", en="AdamW beta1.")
    adam_beta2: float = arg(0.95, es="beta2 de AdamW.", en="AdamW beta2.")
    adam_eps: float = arg(1e-8, es="epsilon de AdamW.", en="AdamW epsilon.")
    max_grad_norm: float = arg(
        1.0, es="Recorte de la norma del gradiente (0 = sin recorte).", en="Gradient norm clipping (0 = no clipping)."
    )
    precision: Precision = arg(
        "auto",
        es="Precisión: auto (bf16 si el dispositivo la acelera), fp32, fp16, bf16.",
        en="Precision: auto (bf16 where the device accelerates it), fp32, fp16, bf16.",
    )
    gradient_checkpointing: bool | None = arg(
        None,
        es="Recalcula activaciones en el backward para ahorrar memoria (por defecto: el preset).",
        en="Recompute activations in the backward pass to save memory (default: the preset's).",
    )
    compile: bool | None = arg(
        None,
        es="Compila cada bloque del modelo con torch.compile. Por defecto: sí al preentrenar en una GPU CUDA "
        "(1,47× los tokens/s en un modelo de 1,3B en una H200, docs/benchmarks.md); no en CPU ni al "
        "hacer fine-tuning.",
        en="Compile each block of the model with torch.compile. Default: on when pretraining on a CUDA GPU "
        "(1.47x the tokens/s of a 1.3B model on an H200, docs/benchmarks.md); off on "
        "the CPU and for fine-tuning.",
    )
    epochs: int | None = arg(
        None,
        es="Épocas sobre los datos (por defecto 1 si no hay --max-steps ni --max-tokens; la demo sin --data: 8).",
        en="Epochs over the data (default 1 unless --max-steps or --max-tokens; the demo without --data: 8).",
    )
    max_steps: int | None = arg(
        None, es="Detener tras este número de pasos de optimización.", en="Stop after this many optimizer steps."
    )
    max_tokens: int | None = arg(
        None, es="Detener tras ver este número de tokens de entrenamiento.", en="Stop after this many training tokens."
    )
    report_to: str = arg(
        "tensorboard",
        metavar="tensorboard,wandb,mlflow,trackio",
        es="Dónde se registran las métricas además de training_log.csv: tensorboard, wandb, mlflow, "
        "trackio (varios separados por comas) o none. Un tracker caído o mal configurado solo "
        "avisa (docs/training.md, Seguimiento de experimentos).",
        en="Where metrics are reported besides training_log.csv: tensorboard, wandb, mlflow, trackio "
        "(several separated by commas) or none. A tracker that is down or misconfigured only "
        "warns (docs/training.en.md, Experiment trackers).",
    )
    seed: int = arg(42, es="Semilla (pesos iniciales, orden de los datos).", en="Seed (initial weights, data order).")
    log_interval: int = arg(10, es="Pasos entre líneas de registro.", en="Steps between log lines.")
    eval_interval: int = arg(
        0,
        es="Pasos entre validaciones (0 = solo al final de cada época).",
        en="Steps between validations (0 = only at the end of each epoch).",
    )
    eval_batches: int = arg(
        50,
        es="Máximo de micro-lotes por validación y proceso (0 = todos).",
        en="Maximum micro-batches per validation and process (0 = all).",
    )
    eval_suite: str = arg(
        "",
        metavar="aura-es",
        es="Batería de tareas que se evalúa durante el entrenamiento (aura-es, sin red).",
        en="Task suite evaluated during training (aura-es, offline).",
    )
    eval_suite_interval: int = arg(
        0, es="Pasos entre evaluaciones de --eval-suite.", en="Steps between --eval-suite evaluations."
    )
    eval_suite_limit: int = arg(
        0,
        es="Como mucho N preguntas por tarea en --eval-suite (0 = todas).",
        en="At most N items per task in --eval-suite (0 = all).",
    )
    save_steps: int | None = arg(
        None,
        es="Pasos entre checkpoints (por defecto: el preset; 0 = solo por época).",
        en="Steps between checkpoints (default: the preset's; 0 = per epoch only).",
    )
    keep_last: int = arg(
        3,
        es="Checkpoints de paso (checkpoint-step-N, interrupt-step-N) que se conservan: los "
        "últimos guardados (0 = todos). Los de época (checkpoint-epoch-N) y best/ se "
        "conservan siempre.",
        en="Step checkpoints (checkpoint-step-N, interrupt-step-N) to keep: the most recently "
        "saved (0 = all). Epoch checkpoints (checkpoint-epoch-N) and best/ are always kept.",
    )
    resume_from: str | None = arg(
        None, es="Reanuda desde un checkpoint: ruta o 'latest'.", en="Resume from a checkpoint: a path or 'latest'."
    )
    overwrite: bool = arg(
        False,
        es="Empieza de cero en un --output-dir que ya contiene otra ejecución de Aura "
        "(borra sus checkpoints, registros y final/; un directorio que no creó "
        "Aura nunca se vacía).",
        en="Start over in an --output-dir that already holds another Aura run (removes its "
        "checkpoints, logs and final/; a directory Aura did not create is never cleared).",
    )
    fork: bool = arg(
        False,
        es="Con --resume-from de un checkpoint anterior al último: sigue desde él y aparta "
        "los posteriores (y final/) en RUN_DIR/forked-from-step-N-FECHA/.",
        en="With --resume-from of a checkpoint older than the newest: continue from it and move the "
        "later ones (and final/) aside into RUN_DIR/forked-from-step-N-TIME/.",
    )
    allow_plan_change: bool = arg(
        False,
        es="Con --resume-from: permite reanudar con otro número de procesos, lote "
        "global, comunicación (--ddp-comm, --local-steps) u otro valor de un "
        "flag del plan; el cambio queda anotado en el historial de run.json.",
        en="With --resume-from: allow resuming with another number of processes, global "
        "batch, communication (--ddp-comm, --local-steps) or another value of a plan "
        "flag; the change is recorded in run.json's history.",
    )
    load_sharded: bool = arg(
        False,
        es="Permite reanudar un checkpoint FSDP (dcp/) sin FSDP (un proceso o DDP), "
        "redistribuido a esta ejecución; sus metadatos se leen con un deserializador "
        "restringido (docs/security.md).",
        en="Allow resuming an FSDP checkpoint (dcp/) without FSDP (one process or DDP), "
        "resharded to this run; its metadata is read with a restricted unpickler "
        "(docs/security.en.md).",
    )
    time_budget: float = arg(
        72.0,
        es="Horas disponibles. Con --lr-schedule wsd, el enfriamiento empieza cuando el "
        "tiempo que queda es su parte (--cooldown-fraction) y la ejecución termina "
        "enfriada y guardada al agotarlas; con cosine solo avisa si el ETA las supera "
        "(0 = sin límite).",
        en="Hours available. With --lr-schedule wsd the cooldown starts when the time left is "
        "its share (--cooldown-fraction) and the run ends cooled down and saved when they "
        "run out; with cosine it only warns when the ETA exceeds them (0 = no limit).",
    )
    max_bad_steps: int = arg(
        5,
        es="Pasos seguidos con pérdida NaN/inf tolerados antes de detenerse.",
        en="Consecutive steps with NaN/inf loss tolerated before stopping.",
    )
    device: str = arg(
        "auto", es="Dispositivo: auto, cpu, cuda, cuda:N, mps.", en="Device: auto, cpu, cuda, cuda:N, mps."
    )
    strategy: str = arg(
        "auto",
        choices=("auto", "ddp", "fsdp", "none"),
        es="Paralelismo bajo torchrun (auto: DDP si cabe, si no FSDP2).",
        en="Parallelism under torchrun (auto: DDP if it fits, else FSDP2).",
    )
    backend: str = arg("auto", choices=("auto", "nccl", "gloo"), es="Backend distribuido.", en="Distributed backend.")
    ddp_comm: str = arg(
        "none",
        choices=("none", "bf16", "powersgd"),
        es="All-reduce de DDP para redes lentas: none (fp32), bf16 (la mitad de bytes) o powersgd "
        "(compresión de rango bajo con realimentación del error).",
        en="DDP's all-reduce for slow networks: none (fp32), bf16 (half the bytes) or powersgd "
        "(low-rank compression with error feedback).",
    )
    powersgd_rank: int = arg(
        4,
        es="Rango de PowerSGD (más bajo: menos bytes, aproximación más burda).",
        en="PowerSGD rank (lower: fewer bytes, coarser approximation).",
    )
    powersgd_warmup: int = arg(
        10,
        es="Pasos de all-reduce completo antes de que PowerSGD comprima (mínimo 2).",
        en="Steps of full all-reduce before PowerSGD compresses (at least 2).",
    )
    local_steps: int | None = arg(
        None,
        es="SGD local (DiLoCo): pasos de cada proceso por su cuenta entre dos "
        "sincronizaciones; sin DDP (para enlaces muy lentos).",
        en="Local SGD (DiLoCo): steps each rank takes on its own between two "
        "synchronisations; no DDP (for very slow links).",
    )
    outer_lr: float = arg(
        0.7,
        es="Tasa del optimizador externo de --local-steps (SGD Nesterov).",
        en="Learning rate of --local-steps' outer optimizer (SGD Nesterov).",
    )
    outer_momentum: float = arg(
        0.9, es="Momento del optimizador externo de --local-steps.", en="Momentum of --local-steps' outer optimizer."
    )

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)
        for flag, value in (
            ("batch-size", self.batch_size),
            ("gradient-accumulation-steps", self.gradient_accumulation_steps),
            ("learning-rate", self.learning_rate),
            ("epochs", self.epochs),
            ("max-steps", self.max_steps),
            ("max-tokens", self.max_tokens),
            ("log-interval", self.log_interval),
        ):
            if value is not None and value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
        for flag, value in (
            ("min-lr", self.min_lr),
            ("warmup-steps", self.warmup_steps),
            ("weight-decay", self.weight_decay),
            ("max-grad-norm", self.max_grad_norm),
            ("eval-interval", self.eval_interval),
            ("eval-batches", self.eval_batches),
            ("save-steps", self.save_steps),
            ("keep-last", self.keep_last),
            ("time-budget", self.time_budget),
            ("max-bad-steps", self.max_bad_steps),
            ("adam-eps", self.adam_eps),
            ("eval-suite-interval", self.eval_suite_interval),
            ("eval-suite-limit", self.eval_suite_limit),
        ):
            if value is not None and value < 0:
                raise AuraError(M("non_negative", flag=flag, value=value))
        for flag, value in (("adam-beta1", self.adam_beta1), ("adam-beta2", self.adam_beta2)):
            if not 0 <= value < 1:
                raise AuraError(M("beta", flag=flag, value=value))
        if not 0 <= self.cooldown_fraction < 1:
            raise AuraError(M("cooldown", value=self.cooldown_fraction))
        if self.min_lr is not None and self.learning_rate is not None and self.min_lr > self.learning_rate:
            raise AuraError(M("min_lr", min_lr=self.min_lr, lr=self.learning_rate))
        if self.eval_suite and self.eval_suite != "aura-es":
            raise AuraError(M("bad_suite", suite=self.eval_suite))
        if self.eval_suite and not self.eval_suite_interval:
            raise AuraError(M("suite_interval", suite=self.eval_suite))
        from aura.train.run.trackers import parse_report_to

        self.report_to = ",".join(parse_report_to(self.report_to)) or "none"  # exit 2 with a hint when unknown
        self._check_comm()

    @property
    def report_destinations(self) -> tuple[str, ...]:
        """--report-to as a tuple (``()`` for none)."""
        from aura.train.run.trackers import parse_report_to

        return parse_report_to(self.report_to)

    def _check_comm(self) -> None:
        """--ddp-comm / --local-steps: values and the combinations that cannot work (aura.distributed.comm_hooks)."""
        if self.local_steps is not None and self.local_steps < 1:
            raise AuraError(M("local_steps", value=self.local_steps))
        for flag, value in (("powersgd-rank", self.powersgd_rank), ("outer-lr", self.outer_lr)):
            if value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
        if self.powersgd_warmup < 2:
            raise AuraError(M("powersgd_warmup", value=self.powersgd_warmup))
        if not 0 <= self.outer_momentum < 1:
            raise AuraError(M("beta", flag="outer-momentum", value=self.outer_momentum))
        if self.local_steps is not None and self.ddp_comm != "none":
            raise AuraError(M("local_and_hook", mode=self.ddp_comm))
        flag = "--local-steps" if self.local_steps is not None else "--ddp-comm" if self.ddp_comm != "none" else None
        if flag and getattr(self, "deepspeed", None):
            raise AuraError(M("comm_deepspeed", flag=flag))
        if self.ddp_comm != "none" and self.strategy == "fsdp":
            raise AuraError(M("comm_fsdp", mode=self.ddp_comm))


def explicit_fields(cfg) -> set[str]:
    """Names of fields whose value differs from the dataclass default (i.e. the user set them)."""
    out = set()
    for f in dataclasses.fields(cfg):
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        )  # type: ignore[misc]
        if getattr(cfg, f.name) != default:
            out.add(f.name)
    return out


def with_defaults(cfg, **values):
    """A copy of ``cfg`` where every field still ``None`` takes ``values[field]`` (explicit flags win)."""
    changes = {k: v for k, v in values.items() if getattr(cfg, k) is None}
    return dataclasses.replace(cfg, **changes) if changes else cfg


@dataclass(frozen=True)
class StepPlan:
    """How long a run is (optimizer steps, per epoch and in all, the epochs that implies) and its LR schedule."""

    total_steps: int
    steps_per_epoch: int
    epochs: int
    tokens_per_step: int
    schedule: Schedule | None = None

    def lr(self, step: int) -> float:
        assert self.schedule is not None
        return self.schedule.lr(step)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["schedule"] = self.schedule.to_dict() if self.schedule is not None else None
        return out


def resolve_steps(
    args: TrainArgs, *, batches_per_epoch: int, tokens_per_micro_batch: int, world_size: int = 1
) -> StepPlan:
    """--max-steps > --max-tokens > --epochs (default 1); the smallest limit given wins."""
    accum = args.gradient_accumulation_steps or 1
    steps_per_epoch = max(1, math.ceil(batches_per_epoch / accum))
    tokens_per_step = tokens_per_micro_batch * accum * world_size
    limits = []
    if args.max_steps:
        limits.append(args.max_steps)
    if args.max_tokens:
        limits.append(max(1, math.ceil(args.max_tokens / tokens_per_step)))
    if args.epochs or not limits:
        limits.append((args.epochs or 1) * steps_per_epoch)
    total = min(limits)
    return StepPlan(
        total, steps_per_epoch, math.ceil(total / steps_per_epoch), tokens_per_step, schedule_for(args, total)
    )
