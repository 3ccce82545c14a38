"""The ``aura finetune --objective grpo`` side of the fine-tuning setup (``GRPOSetup``, the registry's entry).

Prompts (``aura.data.prompts``) and rewards (``aura.data.rewards``, a user's file imported before the model
loads, so its mistakes show first), the rollout source (``aura.train.objectives.rollout``) with Aura's
sampler or vLLM, the GRPO objective, the reference (the base with the adapter disabled for LoRA/QLoRA, a
frozen copy for full fine-tuning, sharded like the model under FSDP2, none with ``--beta 0``) and the validation
reward's evaluator (``aura.train.objectives.grpo_eval``). One process, DDP, FSDP2 and DeepSpeed ZeRO-1/2; not
ZeRO-3, whose partitioned weights the rollouts would need whole, nor vLLM with FSDP2.
"""

from __future__ import annotations

import dataclasses

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.train.objectives.grpo_args import M as AM
from aura.train.objectives.registry import ObjectiveSetup

M = Messages(
    "grpo_setup",
    {
        "demo_data": (
            "Sin --data: se usan los problemas de matemáticas en español incluidos ({path}).",
            "No --data: using the embedded Spanish math problems ({path}).",
        ),
        "rewards": ("Recompensas: {rewards}.", "Rewards: {rewards}."),
        "user_code": (
            "La recompensa {name} es código tuyo ({spec}): se ejecuta con tus permisos.",
            "The reward {name} is your own code ({spec}): it runs with your rights.",
        ),
        "prompts": (
            "Prompts: {train} de entrenamiento, {val} de validación; {g:respuesta|respuestas} por prompt, "
            "{per_step:prompt|prompts} por paso.",
            "Prompts: {train} for training, {val} for validation; {g:completion|completions} per prompt, "
            "{per_step:prompt|prompts} per step.",
        ),
        "window": (
            "--batch-size ({batch}) x --gradient-accumulation-steps ({accum}) x {world:proceso|procesos} = "
            "{total:respuesta|respuestas} por paso: debe ser múltiplo de --num-generations ({g}).",
            "--batch-size ({batch}) x --gradient-accumulation-steps ({accum}) x {world:process|processes} = "
            "{total:completion|completions} per step: it must be a multiple of --num-generations ({g}).",
        ),
        "engine": ("Generación: {engine}; referencia: {reference}.", "Rollouts: {engine}; reference: {reference}."),
        "too_long": (
            "El prompt más largo ({where}: {prompt:token|tokens}) más --max-completion-length ({completion}) no "
            "cabe en el contexto del modelo ({ctx:token|tokens}). Baja --max-completion-length o pon "
            "--max-prompt-length.",
            "The longest prompt ({where}: {prompt:token|tokens}) plus --max-completion-length ({completion}) "
            "does not fit the model's context ({ctx:token|tokens}). Lower --max-completion-length or set "
            "--max-prompt-length.",
        ),
        "gspo_sum": (
            "--importance-sampling-level sequence con --loss-type {loss}: la pérdida suma las contribuciones de "
            "cada token, así que cada respuesta pesa según su longitud en lugar de optimizar el objetivo por "
            "respuesta de GSPO. Para el planteamiento del artículo usa --loss-type grpo.",
            "--importance-sampling-level sequence with --loss-type {loss}: the loss sums per-token "
            "contributions, so each completion weighs by its length instead of optimising GSPO's per-completion "
            "objective. For the paper's setup use --loss-type grpo.",
        ),
        "engine_torch": ("motor PyTorch de Aura (caché KV, lotes)", "Aura's PyTorch engine (KV cache, batched)"),
        "engine_vllm": (
            "vLLM en el mismo dispositivo (pesos sincronizados en cada paso)",
            "vLLM on the same device (weights synced every step)",
        ),
        "ref_none": ("ninguna (--beta 0)", "none (--beta 0)"),
        "ref_adapter": ("el modelo base con el adaptador desactivado", "the base model with the adapter disabled"),
        "no_signal": (
            "0 de {n:grupo|grupos} tuvieron señal de recompensa: el modelo no cambió. Las {g:respuesta|respuestas} de "
            "cada prompt recibieron siempre la misma recompensa, así que todas las ventajas fueron 0. Usa una "
            "recompensa que el modelo pueda ganar (--reward format, length, spanish) o prompts más fáciles.",
            "0 of {n:group|groups} had a reward signal: the model did not change. The {g:completion|completions} of "
            "each "
            "prompt always got the same reward, so every advantage was 0. Use a reward the model can earn "
            "(--reward format, length, spanish) or easier prompts.",
        ),
        "signal": (
            "{k} de {n:grupo|grupos} tuvieron señal de recompensa (recompensas distintas entre sus "
            "{g:respuesta|respuestas}).",
            "{k} of {n:group|groups} had a reward signal (different rewards among their {g:completion|completions}).",
        ),
        "dynamic": (
            "Muestreo dinámico (DAPO): {r:grupo regenerado|grupos regenerados} con otro prompt, "
            "{d:grupo sin señal quitado|grupos sin señal quitados} de la pérdida.",
            "Dynamic sampling (DAPO): {r:group resampled|groups resampled} with another prompt, "
            "{d:group without signal dropped|groups without signal dropped} from the loss.",
        ),
        "ref_copy": ("una copia congelada del modelo inicial", "a frozen copy of the starting model"),
        "tools": (
            "Herramientas de {path}: {names} (código tuyo: cada llamada se ejecuta en un subproceso aislado, "
            "hasta {turns:turno|turnos} por respuesta).",
            "Tools from {path}: {names} (your own code: each call runs in an isolated subprocess, up to "
            "{turns:turn|turns} per completion).",
        ),
    },
)
GRPO_LR_LORA, GRPO_LR_FULL = 1e-5, 1e-6  # TRL GRPOConfig's default is 1e-6 for full weights


def load(cfg) -> tuple[list, object]:
    """(the prompts of --data or the embedded math set, the RewardSet): rewards first, a user's file included."""
    from aura.data.prompts import DEFAULT_PROMPTS, load_prompts
    from aura.data.rewards import DEFAULT_FORMAT, RewardSet, parse_reward

    rewards = RewardSet(
        [
            parse_reward(
                spec,
                format_pattern=cfg.format_pattern or DEFAULT_FORMAT,
                max_completion_length=cfg.max_completion_length,
                overlong_buffer=cfg.overlong_buffer,
            )
            for spec in cfg.rewards_or_default
        ]
    )
    for reward, spec in zip(rewards.rewards, cfg.rewards_or_default):
        if reward.user:
            console.warn(M("user_code", name=reward.name, spec=spec))
    console.info(M("rewards", rewards=", ".join(f"{r.name} x {num(r.weight, 'g')}" for r in rewards.rewards)))
    if not cfg.data:
        console.info(M("demo_data", path=DEFAULT_PROMPTS))
    items = load_prompts(cfg.data, split=cfg.split, need_answer=any(r.needs_answer for r in rewards.rewards))
    return items, rewards


def load_tools(cfg):
    """The ToolBox of ``--tools`` (its files imported now, with a warning: the user's code), or None."""
    if not cfg.tools:
        return None
    from aura.inference.sandbox import Limits
    from aura.inference.tools import ToolBox, load_tools

    tools = load_tools(cfg.tools)
    console.warn(M("tools", path=cfg.tools, names=", ".join(t.name for t in tools), turns=cfg.max_tool_turns))
    return ToolBox(tools, limits=Limits(timeout=cfg.tool_timeout, memory_mb=cfg.tool_memory_mb))


def encode(cfg, tok, items: list, *, templated: bool, tools: list[dict] | None = None) -> tuple[list, list]:
    """(training prompts, validation prompts) as token ids, split by --val-fraction (``tools``: the schemas
    offered in the chat template)."""
    from aura.data.prompts import encode_prompts
    from aura.data.sft import split_train_val

    train, val = split_train_val(items, val_fraction=cfg.val_fraction, seed=cfg.seed)
    enc = dict(templated=templated, max_prompt_length=cfg.max_prompt_length, tools=tools)
    return encode_prompts(train, tok, **enc), encode_prompts(val, tok, **enc) if val else []


class GRPOSetup(ObjectiveSetup):
    """GRPO (and GSPO, its sequence-level ratios): prompts and rewards, rollouts sampled while training."""

    name = "grpo"
    sections = ("grpo",)
    rewards = None  # the RewardSet (set by ``load``)
    tools = None  # the ToolBox of --tools (set by ``load``), or None

    @classmethod
    def check_across(cls, cfg) -> None:
        """No preference flag GRPO cannot honour, no DeepSpeed ZeRO-3 (its rollouts need whole weights), vLLM
        where it runs (not with FSDP2's shards); --beta 0 by default."""
        from aura.train.optim.deepspeed import zero_stage

        for flag, bad in (
            ("dpo-loss", cfg.dpo_loss != "sigmoid"),
            ("label-smoothing", cfg.label_smoothing),
            ("precompute-ref", cfg.precompute_ref),
            ("train-on-prompt", cfg.train_on_prompt),
            ("packing", cfg.packing),
        ):
            if bad:
                raise AuraError(AM("not_grpo", flag=flag))
        if cfg.max_prompt_length is not None and cfg.max_prompt_length <= 0:
            raise AuraError(AM("positive", flag="max-prompt-length", value=cfg.max_prompt_length))
        if cfg.beta is not None and cfg.beta < 0:
            raise AuraError(AM("not_negative", flag="beta", value=cfg.beta))
        if cfg.deepspeed and zero_stage(cfg.deepspeed) == 3:
            raise AuraError(AM("zero3", path=cfg.deepspeed))
        if cfg.rollout_engine == "vllm" and cfg.strategy == "fsdp":
            raise AuraError(AM("vllm_fsdp"))
        if cfg.rollout_engine == "vllm" and cfg.method == "qlora":
            raise AuraError(AM("qlora_vllm"))
        if cfg.rollout_engine == "vllm":
            from aura.train.objectives.grpo_args import vllm_usable

            if not vllm_usable():
                raise AuraError(AM("no_vllm"))
        if cfg.beta is None:
            cfg.beta = 0.0
        if cfg.temperature is None:
            cfg.temperature = 1.0

    @classmethod
    def inputs(cls, cfg) -> list:
        """The reward models' folders (``--reward model:PATH``), checked now."""
        from aura.data.rewards import model_paths

        return model_paths(cfg.rewards_or_default)

    @classmethod
    def learning_rate(cls, method: str) -> float:
        return GRPO_LR_FULL if method == "full" else GRPO_LR_LORA

    def load(self, cfg) -> list:
        items, self.rewards = load(cfg)
        self.tools = load_tools(cfg)
        return items

    def conversations(self, items: list) -> list:
        """Each prompt with an assistant turn (its answer, if any)."""
        from aura.data.sft import Conversation

        return [
            Conversation(messages=p.messages + [{"role": "assistant", "content": str(p.answer or "-")}], where=p.where)
            for p in items
        ]

    def encode(self, cfg, tok, items: list, *, templated: bool) -> tuple[list, list]:
        if self.tools is not None:
            from aura.inference.tools import check_template

            check_template(tok, model=cfg.base_model)
        return encode(cfg, tok, items, templated=templated, tools=self.tools.schemas if self.tools else None)

    def resolve(self, cfg, dist):
        return resolve(cfg, dist)

    def sources(self, cfg, tok, model, train_ex: list, val_ex: list, *, run, packing: bool, base_name: str):
        """(the rollout source, None): GRPO's validation is the reward evaluator. The reward models (``--reward
        model:PATH``) go to the training device."""
        self.rewards.to(run.dist.device)
        source = rollouts(
            cfg, tok, model, train_ex, val_ex, self.rewards, run=run, base_name=base_name, tools=self.tools
        )
        return source, None

    def build(self, cfg, model, train_ex: list, val_ex: list, *, tok, run):
        from aura.train.objectives.grpo import GRPO

        return GRPO(
            loss_type=cfg.loss_type,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            beta=cfg.beta,
            temperature=cfg.temperature,
            max_completion_length=cfg.max_completion_length,
            reward_names=self.rewards.names,
            importance_sampling_level=cfg.importance_sampling_level,
            tools=self.tools is not None,
        )

    def completion_tokens(self, cfg) -> int:
        return cfg.max_completion_length

    @classmethod
    def plan_step(cls, cfg, *, params, rows, example_tokens, params_of):
        """``rows`` completions: G per prompt, each at full length; 8 x params per token (the LoRA update's
        4, the old policy's and the reference's forwards) and the sampling's 2 x params per generated token."""
        import math

        from aura.train.objectives.registry import PlannedStep

        prompt = cfg.max_prompt_length or cfg.max_length
        if example_tokens:
            prompt = min(prompt, math.ceil(example_tokens))
        return PlannedStep(
            tokens=rows * (prompt + cfg.max_completion_length),
            flops_per_token=8.0 * params if params else None,
            sample_flops=2.0 * params * rows * cfg.max_completion_length if params else 0.0,
            rows=max(rows // max(cfg.num_generations, 1), 1),
        )

    def evaluators(self, cfg, tok, model, val_ex: list, data, *, steps_per_epoch: int) -> list:
        from aura.train.objectives.grpo_eval import evaluators

        return evaluators(cfg, tok, model, val_ex, data, steps_per_epoch=steps_per_epoch)

    def finish(self, data, out):
        return signal_summary(data, out)


def optimisation_defaults(cfg) -> dict:
    """GRPO's defaults: one prompt's G completions per micro-batch, 4 prompts per step, lr 1e-5 (LoRA) or
    1e-6 (full), one epoch."""
    return {
        "batch_size": cfg.num_generations,
        "gradient_accumulation_steps": 4,
        "learning_rate": GRPO_LR_FULL if cfg.method == "full" else GRPO_LR_LORA,
        "epochs": 1,
    }


def resolve(cfg, dist):
    """``cfg`` with GRPO's defaults where the user gave nothing, and DDP for --strategy auto on several ranks;
    checks that a step holds whole groups."""
    from aura.train.args import with_defaults

    defaults = optimisation_defaults(cfg)
    if cfg.epochs is not None or cfg.max_steps is not None or cfg.max_tokens is not None:
        defaults.pop("epochs")
    cfg = with_defaults(cfg, **defaults)
    if cfg.strategy == "auto" and dist.world_size > 1:  # one process: auto stays auto (said as "a single process")
        cfg = dataclasses.replace(cfg, strategy="ddp")
    total = cfg.batch_size * cfg.gradient_accumulation_steps * dist.world_size
    if total % cfg.num_generations:
        raise AuraError(
            M(
                "window",
                batch=cfg.batch_size,
                accum=cfg.gradient_accumulation_steps,
                world=dist.world_size,
                total=total,
                g=cfg.num_generations,
            )
        )
    return cfg


def _reference(cfg, model, *, run) -> tuple[object, str]:
    """(the frozen copy that is the reference, or None: the base with the adapter disabled, or no reference;
    the message key that says which)."""
    if not cfg.beta:
        return None, "ref_none"
    if cfg.method != "full":
        return None, "ref_adapter"
    from aura.train.objectives.preference import frozen_copy

    return frozen_copy(model, run=run, cfg=cfg), "ref_copy"


def _source_class(cfg, tok, tools) -> tuple[type, dict]:
    """(RolloutSource, {}), or with ``tools`` the multi-turn ``ToolRolloutSource`` and its arguments."""
    from aura.inference.loading import end_of_turn_ids
    from aura.train.objectives.rollout import RolloutSource

    if tools is None:
        return RolloutSource, {}
    from aura.train.objectives.tool_rollout import ToolRolloutSource

    return ToolRolloutSource, dict(tools=tools, max_tool_turns=cfg.max_tool_turns, end_of_turn=end_of_turn_ids(tok))


def rollouts(cfg, tok, model, train_ex: list, val_ex: list, rewards, *, run, base_name: str, tools=None):
    """The rollout source for ``model`` (not yet parallelised: the source samples with this very module, whose
    parameters DDP's wrapper and DeepSpeed's engine share, and which FSDP2 shards in place: it then samples from
    the weights gathered for the window, ``aura.distributed.whole_weights``); with ``tools`` (a ToolBox) the
    multi-turn one, whose sampler also stops at ``</tool_call>``."""
    from aura.inference.loading import end_of_turn_ids
    from aura.inference.sampling import SamplingParams
    from aura.models.presets import context_length

    ctx = context_length(model.config)
    longest = max(train_ex + val_ex, key=lambda p: len(p.input_ids))
    if ctx and len(longest.input_ids) + cfg.max_completion_length > ctx:
        raise AuraError(
            M(
                "too_long",
                prompt=len(longest.input_ids),
                where=longest.item.where,
                completion=cfg.max_completion_length,
                ctx=ctx,
            )
        )
    reference, ref_how = _reference(cfg, model, run=run)
    sampling = SamplingParams(
        max_new_tokens=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        stop_ids=tuple(end_of_turn_ids(tok)),
        stop_strings=tuple(cfg.stop) + (("</tool_call>",) if tools is not None else ()),
    )
    generate, engine = None, "engine_torch"
    if cfg.rollout_engine == "vllm":  # only when asked: `auto` never picks an engine that has not run here
        from aura.train.objectives.vllm_rollout import VLLMGenerator, model_len

        generate, engine = (
            VLLMGenerator(
                model,
                base_name=base_name,
                sampling=sampling,
                cfg=cfg,
                dist=run.dist,
                max_model_len=model_len(len(longest.input_ids), cfg.max_completion_length),
                precision=run.precision,
            ),
            "engine_vllm",
        )
    console.info(M("engine", engine=M(engine), reference=M(ref_how)))
    kind, extra = _source_class(cfg, tok, tools)
    source = kind(
        train_ex,
        policy=model,
        rewards=rewards,
        tokenizer=tok,
        sampling=sampling,
        num_generations=cfg.num_generations,
        batch_size=cfg.batch_size,
        accumulation=cfg.gradient_accumulation_steps,
        scale_rewards=cfg.scale_rewards,
        temperature=cfg.temperature,
        beta=cfg.beta,
        dist=run.dist,
        precision=run.precision,
        seed=cfg.seed,
        reference=reference,
        generate=generate,
        mask_truncated=cfg.mask_truncated_completions,
        dynamic_sampling=cfg.dynamic_sampling,
        resample_rounds=cfg.resample_rounds,
        **extra,
    )
    console.info(
        M("prompts", train=len(train_ex), val=len(val_ex), g=cfg.num_generations, per_step=source.prompts_per_window)
    )
    if cfg.importance_sampling_level == "sequence" and cfg.loss_type != "grpo":  # TRL warns the same
        console.warn(M("gspo_sum", loss=cfg.loss_type))
    return source


def signal_summary(source, out):
    """The job's ``finish`` (rank 0, a finished run): how many of the run's groups had a reward signal, said in
    the log (a warning when none did: the model did not change) and written to ``OUT/reward_signal.json``."""
    from pathlib import Path

    from aura.core.atomic import atomic_write_json
    from aura.core.rundir import REWARD_SIGNAL

    def finish(_result) -> None:
        n, k = source.groups, source.groups_with_signal
        if n:
            (console.warn if k == 0 else console.info)(M("no_signal" if k == 0 else "signal", n=n, k=k, g=source.G))
        if source.dynamic != "off":
            console.info(M("dynamic", r=source.groups_resampled, d=source.groups_dropped))
        summary = {"groups": n, "groups_with_signal": k, "num_generations": source.G}
        if source.dynamic != "off":
            summary.update(groups_dropped=source.groups_dropped, groups_resampled=source.groups_resampled)
        atomic_write_json(Path(out) / REWARD_SIGNAL, summary)

    return finish
