"""The ``aura finetune --objective distill`` side of the fine-tuning setup (``DistillSetup``, the registry's entry).

SFT's data and batches (instructions: prompt/completion or messages), a frozen teacher loaded from
``--teacher`` after its tokenizer is found equal to the student's, the batch source that swaps in sampled
answers (``aura.train.objectives.distill.DistillSource``) and the generalised-JSD objective (``Distill``).
"""

from __future__ import annotations

from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.train.objectives.distill_args import M as AM
from aura.train.objectives.sft_setup import SFTSetup

M = Messages(
    "distill_setup",
    {
        "tokenizers_differ": (
            "El maestro ({teacher}) y el alumno ({student}) no comparten tokenizador: {what} difiere "
            "(alumno: {s}; maestro: {t}). La destilación compara las distribuciones del siguiente token sobre el "
            "mismo vocabulario: usa un maestro de la misma familia que --base-model (mismo tokenizador y "
            "tamaño de vocabulario).",
            "The teacher ({teacher}) and the student ({student}) do not share a tokenizer: they differ in {what} "
            "(student: {s}; teacher: {t}). Distillation compares next-token distributions over the same "
            "vocabulary: use a teacher of --base-model's family (the same tokenizer and vocabulary size).",
        ),
        "k_vocab": ("el vocabulario", "the vocabulary"),
        "k_size": ("el tamaño de vocabulario del modelo (vocab_size)", "the model's vocabulary size (vocab_size)"),
        "k_special": ("el id de {name}", "the id of {name}"),
        "teacher": (
            "Maestro: {path} ({params:parámetro|parámetros}, congelado, {dtype}); beta {beta} (0 = KL directa, 1 = KL "
            "inversa), lmbda {lmbda}: {share:g} % de los micro-lotes con respuestas del alumno{seq}.",
            "Teacher: {path} ({params:parameter|parameters}, frozen, {dtype}); beta {beta} (0 = forward KL, 1 = "
            "reverse KL), lmbda {lmbda}: {share:g}% of the micro-batches with the student's own answers{seq}.",
        ),
        "seq_kd": (", el resto con respuestas del maestro", ", the others with the teacher's answers"),
        "too_long": (
            "El prompt más largo ({where}: {prompt:token|tokens}) más --max-new-tokens ({new}) no cabe en el "
            "contexto del modelo ({ctx:token|tokens}). Baja --max-new-tokens o --max-length.",
            "The longest prompt ({where}: {prompt:token|tokens}) plus --max-new-tokens ({new}) does not fit the "
            "model's context ({ctx:token|tokens}). Lower --max-new-tokens or --max-length.",
        ),
    },
)
SPECIALS = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


def check_same_tokenizer(student_tok, teacher_tok, *, student: str, teacher: str, trust_remote_code: bool) -> None:
    """Refuse a teacher whose tokenizer (vocabulary, special ids) or model vocabulary size is not the student's."""
    from transformers import AutoConfig

    def refuse(what: str, s, t) -> None:
        raise AuraError(M("tokenizers_differ", teacher=teacher, student=student, what=what, s=s, t=t))

    sv, tv = student_tok.get_vocab(), teacher_tok.get_vocab()
    if sv != tv:
        only = sorted(set(sv.items()) ^ set(tv.items()))[:3]
        refuse(M("k_vocab"), f"{len(sv)} tokens", f"{len(tv)} tokens; {only}")
    for name in SPECIALS:
        s, t = getattr(student_tok, name, None), getattr(teacher_tok, name, None)
        if s != t:
            refuse(M("k_special", name=name.removesuffix("_token_id")), s, t)
    sizes = [
        AutoConfig.from_pretrained(p, trust_remote_code=trust_remote_code).get_text_config().vocab_size
        for p in (student, teacher)
    ]
    if sizes[0] != sizes[1]:
        refuse(M("k_size"), *sizes)


def load_teacher(cfg, *, run, like):
    """The frozen teacher on the run's device, in the compute dtype, in eval mode: sharded with FSDP2 where the
    student ``like`` will be, or where a whole copy would not fit beside its training state
    (``aura.distributed.place_frozen``, as full fine-tuning's reference); whole under --deepspeed."""
    import torch
    from transformers import AutoModelForCausalLM

    from aura.distributed import place_frozen

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(run.precision, torch.float32)
    teacher = AutoModelForCausalLM.from_pretrained(cfg.teacher, dtype=dtype, trust_remote_code=cfg.trust_remote_code)
    strategy = "none" if cfg.deepspeed else cfg.strategy
    teacher = place_frozen(
        teacher, like=like, dist=run.dist, strategy=strategy, device_memory=run.device_memory, role="teacher"
    )
    return teacher.eval()


class DistillSetup(SFTSetup):
    """On-policy distillation: SFT's data, the student's samples, a teacher's scores (module docstring)."""

    name = "distill"
    sections = ("distill",)
    named_in_identity = True
    teacher = None  # the frozen teacher (set by ``sources``)
    padding_free = False  # one example per row: each row's prompt is sampled from (``DistillSource``)

    @classmethod
    def check_args(cls, cfg) -> None:
        """Distill's own section checks itself, the others refuse their flags; of GRPO's only --temperature
        (sampling) applies."""
        from aura.core.config import flag_name
        from aura.train.objectives.grpo_args import GRPOArgs

        for section in cfg.OBJECTIVE_SECTIONS:
            if section.SECTION in cls.sections:
                section.check_section(cfg)
            elif section is GRPOArgs:
                changed = [n for n in cfg.grpo_defaults_changed() if n != "temperature"]
                if changed:
                    raise AuraError(AM("not_distill", flag=flag_name(changed[0])[2:], why=AM("why_grpo")))
            else:
                section.check_unused(cfg)
        cls.check_across(cfg)

    @classmethod
    def inputs(cls, cfg) -> list:
        """The teacher's folder (--teacher), checked when the run starts."""
        return [cfg.teacher]

    @classmethod
    def check_across(cls, cfg) -> None:
        """No preference flag, no trained prompt or packing, no DeepSpeed ZeRO-3 (on-policy answers need the
        student's whole weights); TRL GKDConfig's beta 0.5 and temperature 0.9 where not given."""
        for flag, bad, why in (
            ("dpo-loss", cfg.dpo_loss != "sigmoid", "why_pref"),
            ("label-smoothing", cfg.label_smoothing, "why_pref"),
            ("precompute-ref", cfg.precompute_ref, "why_pref"),
            ("max-prompt-length", cfg.max_prompt_length, "why_pref"),
            ("train-on-prompt", cfg.train_on_prompt, "why_rows"),
            ("packing", cfg.packing, "why_rows"),
        ):
            if bad:
                raise AuraError(AM("not_distill", flag=flag, why=AM(why)))
        if cfg.deepspeed:
            from aura.train.optim.deepspeed import zero_stage

            if zero_stage(cfg.deepspeed) == 3:
                raise AuraError(AM("zero3", path=cfg.deepspeed))
        if cfg.beta is None:
            cfg.beta = 0.5
        if cfg.temperature is None:
            cfg.temperature = 0.9
        if not 0 <= cfg.beta <= 1:
            raise AuraError(AM("fraction", flag="beta", value=cfg.beta))
        if cfg.temperature <= 0:
            raise AuraError(AM("positive", flag="temperature", value=cfg.temperature))

    def encode(self, cfg, tok, items: list, *, templated: bool) -> tuple[list, list]:
        """The teacher's tokenizer checked first (before any model loads), then SFT's examples."""
        from aura.tokenizer.loading import load_tokenizer
        from aura.train.finetune_config import resolve_base_name

        teacher_tok = load_tokenizer(cfg.teacher, trust_remote_code=cfg.trust_remote_code, flag="--teacher")
        check_same_tokenizer(
            tok,
            teacher_tok,
            student=resolve_base_name(cfg),
            teacher=cfg.teacher,
            trust_remote_code=cfg.trust_remote_code,
        )
        return super().encode(cfg, tok, items, templated=templated)

    def sources(self, cfg, tok, model, train_ex: list, val_ex: list, *, run, packing: bool, base_name: str):
        """(the distillation source over SFT's batches, SFT's validation batches scored by the same loss)."""
        from aura.inference.loading import end_of_turn_ids
        from aura.inference.sampling import SamplingParams
        from aura.models.presets import context_length
        from aura.train.objectives.distill import DistillSource

        ctx = context_length(model.config)
        longest = max(train_ex, key=lambda e: len(e.input_ids))
        if ctx and len(longest.input_ids) + cfg.max_new_tokens > ctx:
            raise AuraError(
                M("too_long", prompt=len(longest.input_ids), where=longest.where, new=cfg.max_new_tokens, ctx=ctx)
            )
        data, val = super().sources(cfg, tok, model, train_ex, val_ex, run=run, packing=False, base_name=base_name)
        self.teacher = load_teacher(cfg, run=run, like=model)
        sampling = SamplingParams(
            max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, stop_ids=tuple(end_of_turn_ids(tok))
        )
        source = DistillSource(
            data,
            policy=model,
            teacher=self.teacher,
            tokenizer=tok,
            sampling=sampling,
            lmbda=cfg.lmbda,
            seq_kd=cfg.seq_kd,
            seed=cfg.seed,
            dist=run.dist,
            precision=run.precision,
            accumulation=cfg.gradient_accumulation_steps or 1,
        )
        return source, val

    def build(self, cfg, model, train_ex: list, val_ex: list, *, tok, run):
        from aura.models.presets import count_parameters
        from aura.train.objectives.distill import Distill

        console.info(
            M(
                "teacher",
                path=cfg.teacher,
                params=count_parameters(self.teacher),
                dtype=str(next(self.teacher.parameters()).dtype).removeprefix("torch."),
                beta=cfg.beta,
                lmbda=cfg.lmbda,
                share=round(cfg.lmbda * 100, 1),
                seq=M("seq_kd") if cfg.seq_kd else "",
            )
        )
        return Distill(teacher=self.teacher, beta=cfg.beta, precision=run.precision)

    def completion_tokens(self, cfg) -> int:
        return int(cfg.lmbda * cfg.max_new_tokens)

    @classmethod
    def plan_step(cls, cfg, *, params, rows, example_tokens, params_of):
        """SFT's step plus the teacher's forward on every token, and the student's sampling on the --lmbda
        share of the rows."""
        import dataclasses

        step = super().plan_step(cfg, params=params, rows=rows, example_tokens=example_tokens, params_of=params_of)
        teacher = params_of(cfg.teacher)
        if step.flops_per_token is None or not teacher:
            return step
        return dataclasses.replace(
            step,
            flops_per_token=step.flops_per_token + 2.0 * teacher,
            sample_flops=2.0 * params * rows * cfg.lmbda * cfg.max_new_tokens,
        )

    def extra_flops_per_token(self, cfg) -> float:
        """The teacher's forward pass: 2 x its matmul parameters per token."""
        from aura.models.presets import matmul_parameters

        return 2.0 * matmul_parameters(self.teacher.config)
