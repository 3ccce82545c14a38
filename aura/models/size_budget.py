"""The model size a time budget can train: ``auto``'s rule when ``--time-budget`` is given.

The rule (Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", the Chinchilla paper): for a
fixed training compute C ≈ 6·N·D FLOPs, the validation loss is lowest near D ≈ 20·N tokens, i.e.
N ≈ sqrt(C / 120). Modern small models (Llama 3, Qwen3, SmolLM) train far past 20 tokens per parameter on
purpose: a smaller model costs less to serve, so they buy inference economy with extra training compute. ``auto``
optimises what the issue asks for, the lowest loss the budget can buy, so it takes the compute-optimal point.

Given each candidate's tokens in the budget (its FLOP/s over 6·N FLOPs per token, times the seconds),
``pick_size`` takes, among the candidates with at least ``MIN_TOKENS_PER_PARAM`` tokens per parameter, the one
whose tokens per parameter are closest to ``COMPUTE_OPTIMAL_TOKENS_PER_PARAM`` on a log scale: the largest model
that still gets about its compute-optimal tokens. Far below 20 (a 1.26 B model on 2.7 tokens per parameter) a
model stops well short of what it could learn; a little above 20 costs little. When no candidate reaches the
minimum (a budget of minutes), the smallest is taken and ``SizeChoice.sensible`` is False (callers warn).

Pure: nothing is printed; ``aura.models.hardware.choose_auto`` asks it, ``aura pipeline plan`` and
``aura pretrain`` print what it returns, and ``bench/bench_size_budget.py`` applies it to measured CPU throughputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from aura.core.i18n import Messages, current_lang, num

COMPUTE_OPTIMAL_TOKENS_PER_PARAM = 20.0  # Hoffmann et al. 2022 (Chinchilla), table 3: ~20 tokens per parameter
MIN_TOKENS_PER_PARAM = 10.0  # "not far below" the optimum: half of it
ASSUMED_MFU = 0.4  # training throughput as a fraction of the device's peak FLOP/s (the pipeline plan's assumption)
FLOPS_PER_TOKEN_PER_PARAM = 6.0  # forward + backward, 6·N (Kaplan et al. 2020; the plan's pretraining estimate)

M = Messages(
    "size_budget",
    {
        "reason": (
            "{device}: con {hours} h a ~{tflops} TFLOP/s ({mfu} % del pico), '{preset}' "
            "({params:parámetro|parámetros}) entrena ~{tokens:token|tokens}, {tpp} por parámetro: el más cercano "
            "al óptimo en cómputo (~{opt} por parámetro, Chinchilla) entre los presets que caben en memoria; "
            "lote {batch}{ckpt}, ~{need} GiB.",
            "{device}: with {hours} h at ~{tflops} TFLOP/s ({mfu} % of peak), '{preset}' "
            "({params:parameter|parameters}) trains ~{tokens:token|tokens}, {tpp} per parameter: the closest to "
            "compute-optimal (~{opt} per parameter, Chinchilla) among the presets that fit memory; "
            "batch {batch}{ckpt}, ~{need} GiB.",
        ),
        "chosen": (
            "tamaño para el presupuesto: '{preset}' ({params:parámetro|parámetros}), ~{tokens:token|tokens} en "
            "{hours} h, {tpp} por parámetro (óptimo en cómputo ≈ {opt}, Chinchilla)",
            "size for the budget: '{preset}' ({params:parameter|parameters}), ~{tokens:token|tokens} in {hours} h, "
            "{tpp} per parameter (compute-optimal ≈ {opt}, Chinchilla)",
        ),
        "kept": (
            "{device}: se reanuda el modelo del checkpoint, '{preset}' ({params:parámetro|parámetros}; una "
            "ejecución no cambia de tamaño): con {hours} h entrena ~{tokens:token|tokens}, {tpp} por parámetro; "
            "lote {batch}{ckpt}, ~{need} GiB.",
            "{device}: resuming the checkpoint's model, '{preset}' ({params:parameter|parameters}; a run keeps "
            "its size): with {hours} h it trains ~{tokens:token|tokens}, {tpp} per parameter; batch {batch}{ckpt}, "
            "~{need} GiB.",
        ),
        "above": (
            "mayor: '{preset}' ({params}): ~{tokens:token|tokens}, {tpp} por parámetro",
            "larger: '{preset}' ({params}): ~{tokens:token|tokens}, {tpp} per parameter",
        ),
        "below": (
            "menor: '{preset}' ({params}): ~{tokens:token|tokens}, {tpp} por parámetro",
            "smaller: '{preset}' ({params}): ~{tokens:token|tokens}, {tpp} per parameter",
        ),
        "too_small": (
            "El presupuesto de {hours} h no da a ningún preset ni {min:token|tokens} por parámetro (el más pequeño, "
            "'{preset}', recibe {tpp}): se usa '{preset}', pero aprenderá poco. Da más horas con --time-budget "
            "o elige un tamaño con --model-preset.",
            "The {hours} h budget gives no preset even {min:token|tokens} per parameter (the smallest, '{preset}', "
            "gets {tpp}): using '{preset}', but it will learn little. Give more hours with --time-budget or "
            "pick a size with --model-preset.",
        ),
        "no_peak": (
            " Sin pico de FLOP/s conocido para este dispositivo, el tamaño no se elige por --time-budget.",
            " With no known peak FLOP/s for this device, the size is not chosen by --time-budget.",
        ),
    },
)


@dataclass(frozen=True)
class SizeOption:
    """One candidate size: its parameters and the tokens the budget trains at its throughput."""

    preset: str
    params: int
    tokens: int

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / max(self.params, 1)


@dataclass(frozen=True)
class SizeChoice:
    """``pick_size``'s answer: the chosen option, every option (largest first) and the budget."""

    chosen: SizeOption
    options: tuple[SizeOption, ...]
    seconds: float
    sensible: bool  # False: no option reached MIN_TOKENS_PER_PARAM (the smallest was taken)

    def _neighbour(self, step: int) -> SizeOption | None:
        i = self.options.index(self.chosen) + step
        return self.options[i] if 0 <= i < len(self.options) else None

    @property
    def above(self) -> SizeOption | None:
        return self._neighbour(-1)

    @property
    def below(self) -> SizeOption | None:
        return self._neighbour(1)

    def lines(self) -> list[str]:
        """The choice and its neighbours, one short line each (``aura pipeline plan``, ``aura pretrain``)."""
        c = self.chosen
        out = [M("chosen", opt=_g(COMPUTE_OPTIMAL_TOKENS_PER_PARAM), hours=_g(self.seconds / 3600), **_fields(c))]
        for key, o in (("above", self.above), ("below", self.below)):
            if o is not None:
                out.append(M(key, **_fields(o)))
        return out

    def warning(self) -> str | None:
        """The warning when the budget is too small for every option (None when the choice is sensible)."""
        if self.sensible:
            return None
        return M(
            "too_small",
            hours=_g(self.seconds / 3600),
            min=_g(MIN_TOKENS_PER_PARAM),
            preset=self.chosen.preset,
            tpp=_g(self.chosen.tokens_per_param),
        )


def budget_tokens(params: int, flops_per_s: float, seconds: float) -> int:
    """Tokens a model of ``params`` parameters trains in ``seconds`` at ``flops_per_s`` (6·N FLOPs per token)."""
    return int(flops_per_s * seconds / (FLOPS_PER_TOKEN_PER_PARAM * max(params, 1)))


def pick_size(options: Sequence[SizeOption], seconds: float) -> SizeChoice:
    """The option whose tokens per parameter are closest (log scale) to the compute-optimal ~20 among those
    with at least MIN_TOKENS_PER_PARAM; the smallest when none has (``sensible`` False). ``options``: any order;
    the answer holds them largest first."""
    if not options:
        raise ValueError("pick_size needs at least one option")
    ordered = tuple(sorted(options, key=lambda o: -o.params))
    enough = [o for o in ordered if o.tokens_per_param >= MIN_TOKENS_PER_PARAM]
    if not enough:
        return SizeChoice(ordered[-1], ordered, seconds, sensible=False)
    best = min(enough, key=lambda o: abs(math.log(o.tokens_per_param / COMPUTE_OPTIMAL_TOKENS_PER_PARAM)))
    return SizeChoice(best, ordered, seconds, sensible=True)


def budget_hours(time_budget: float | None, lr_schedule: str | None) -> float | None:
    """The hours ``auto`` sizes the model for: ``--time-budget`` when the run ends on it, i.e. under WSD (the
    default of every preset ``auto`` picks, hence ``None`` counts as WSD); under cosine the budget only warns."""
    if not time_budget or (lr_schedule or "wsd") != "wsd":
        return None
    return float(time_budget)


def budget_reason(
    choice: SizeChoice,
    *,
    device: str,
    flops_per_s: float,
    peak: float,
    batch: int,
    ckpt: str,
    need: float,
    kept: bool = False,
):
    """``AutoChoice.reason`` for a size chosen by the budget (``aura pretrain``'s line); the warning when the
    budget is too small for every size; ``kept``: the size is a resumed checkpoint's, not the rule's."""
    c = choice.chosen
    if kept:
        hours = _g(choice.seconds / 3600)
        return M("kept", device=device, hours=hours, batch=batch, ckpt=ckpt, need=round(need, 1), **_fields(c))
    if not choice.sensible:
        return choice.warning()
    return M(
        "reason",
        device=device,
        hours=_g(choice.seconds / 3600),
        tflops=_g(flops_per_s / 1e12),
        mfu=round(100 * flops_per_s / peak) if peak else "?",
        opt=_g(COMPUTE_OPTIMAL_TOKENS_PER_PARAM),
        batch=batch,
        ckpt=ckpt,
        need=round(need, 1),
        **_fields(c),
    )


def no_peak_note() -> str:
    return M("no_peak")


def human(n: float) -> str:
    """``501011968`` -> ``501 M``, ``8.67e9`` -> ``8.67 B`` (decimal sign of the language; in Spanish, where a
    "billón" is 10¹², ``8,67·10⁹``)."""
    spanish = current_lang() == "es"
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            if spanish and scale >= 1e9:
                return f"{num(n / scale, '.3g')}·10{'¹²' if scale == 1e12 else '⁹'}"
            return f"{num(n / scale, '.3g')} {unit}"
    return num(n, ".3g")


def _g(x: float) -> str:
    return num(x, ".2g") if x < 10 else num(round(x), ",")


def _fields(o: SizeOption) -> dict:
    return {"preset": o.preset, "params": human(o.params), "tokens": human(o.tokens), "tpp": _g(o.tokens_per_param)}
