"""``aura generate``: text from a model (HF dir, checkpoint, base + adapter, or GGUF via llama.cpp).

One prompt (``--prompt``) streams to the terminal; a prompts file (``--prompts-file``, one prompt per
line, or JSONL with a "prompt" field) runs into ``--output`` JSONL: one object per prompt
with prompt, output, tokens, seconds, tokens_per_s and model. With a transformers model and no
``--repetition-penalty`` its prompts run in batches through Aura's engine (``HFEngine.batch``: greedy, the
answers each prompt gets alone; sampled, each prompt drawn from a key of ``--seed`` and its place in the
file); a GGUF model, or a repetition penalty, answers them one after another. ``--chat`` wraps each prompt in the
model's chat template (a plain "Usuario:/Asistente:" format when it has none).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from aura.core import console
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.files import loads_json
from aura.core.i18n import Messages

M = Messages(
    "generate",
    {
        "need_model": ("Falta --model.", "--model is missing."),
        "need_prompt": ('Indica --prompt "…" o --prompts-file ARCHIVO.', 'Give --prompt "…" or --prompts-file FILE.'),
        "both": ("Usa --prompt o --prompts-file, no los dos.", "Use --prompt or --prompts-file, not both."),
        "bad_value": ("{field} debe ser {expected} (recibido {value}).", "{field} must be {expected} (got {value})."),
        "no_file": ("No existe el archivo de prompts {path}.", "The prompts file {path} does not exist."),
        "not_utf8": (
            "{path} no está en UTF-8: byte {offset} (línea {line}) no es válido. Conviértelo con: "
            "iconv -f latin1 -t utf-8 {path} > prompts_utf8.txt",
            "{path} is not UTF-8: byte {offset} (line {line}) is invalid. Convert it with: "
            "iconv -f latin1 -t utf-8 {path} > prompts_utf8.txt",
        ),
        "bad_jsonl": (
            '{path}, línea {line}: se esperaba un objeto JSON con "prompt" ({err}).',
            '{path}, line {line}: expected a JSON object with "prompt" ({err}).',
        ),
        "empty": ("{path} no contiene prompts.", "{path} contains no prompts."),
        "no_template": (
            "El modelo no tiene plantilla de chat: uso un formato de texto simple (Usuario:/Asistente:).",
            "The model has no chat template: using a plain text format (Usuario:/Asistente:).",
        ),
        "stats": (
            "[{tokens:token|tokens}, {seconds:.2f} s, {tps:.1f} tokens/s]",
            "[{tokens:token|tokens}, {seconds:.2f} s, {tps:.1f} tokens/s]",
        ),
        "progress": (
            "Prompt {i}/{n}: {tokens:token|tokens} en {seconds:.2f} s ({tps:.1f} tokens/s)",
            "Prompt {i}/{n}: {tokens:token|tokens} in {seconds:.2f} s ({tps:.1f} tokens/s)",
        ),
        "written": ("{n:resultado|resultados} en {path}.", "{n:result|results} written to {path}."),
    },
)


@dataclass
class SamplingArgs:
    """Model and sampling flags shared by ``aura generate`` and ``aura chat``."""

    model: str = arg(
        "",
        es="Modelo: directorio Hugging Face, checkpoint, adaptador o archivo .gguf.",
        en="Model: Hugging Face dir, checkpoint, adapter or .gguf file.",
    )
    adapter: str = arg("", es="Adaptador LoRA/QLoRA sobre --model.", en="LoRA/QLoRA adapter on top of --model.")
    allow_other_base: bool = arg(
        False,
        es="Usar el adaptador aunque se entrenara sobre otro modelo base (distinto config.json o embeddings).",
        en="Use the adapter even if it was trained on another base model (different config.json or embeddings).",
    )
    system: str = arg("", es="Mensaje de sistema (chat o --chat).", en="System message (chat or --chat).")
    max_new_tokens: int = arg(256, es="Máximo de tokens nuevos por respuesta.", en="Maximum new tokens per answer.")
    temperature: float = arg(0.7, es="Temperatura (0 = voraz).", en="Temperature (0 = greedy).")
    top_k: int = arg(50, es="Top-k (0 = desactivado).", en="Top-k (0 = off).")
    top_p: float = arg(0.9, es="Top-p (núcleo).", en="Top-p (nucleus).")
    repetition_penalty: float = arg(
        1.0, es="Penalización por repetición (1 = ninguna).", en="Repetition penalty (1 = none)."
    )
    seed: int = arg(0, es="Semilla.", en="Seed.")
    dtype: str = arg(
        "float32",
        es="Tipo de los pesos en PyTorch.",
        en="PyTorch weight dtype.",
        choices=("float32", "bfloat16", "float16"),
    )
    n_ctx: int = arg(0, es="Contexto para GGUF (0 = el del modelo).", en="Context for GGUF (0 = the model's).")


@dataclass
class GenerateConfig(SamplingArgs):
    prompt: str = arg("", es="Texto de entrada.", en="Input text.")
    prompts_file: str = arg(
        "",
        es='Archivo con un prompt por línea (o JSONL con "prompt").',
        en='File with one prompt per line (or JSONL with "prompt").',
    )
    output: str = arg(
        "",
        es="Archivo JSONL de resultados (por defecto OUTPUT_DIR/generations.jsonl).",
        en="Results JSONL file (default OUTPUT_DIR/generations.jsonl).",
    )
    output_dir: str = arg("", es="Directorio de resultados para --prompts-file.", en="Results dir for --prompts-file.")
    chat: bool = arg(
        False,
        es="Envolver cada prompt en la plantilla de chat del modelo.",
        en="Wrap each prompt in the model's chat template.",
    )
    overwrite: bool = arg(
        False,
        es="Sustituir un archivo de resultados existente que no escribió Aura.",
        en="Replace an existing results file that Aura did not write.",
    )

    def __post_init__(self):
        validate_sampling(self)
        if self.prompt and self.prompts_file:
            raise AuraError(M("both"))


def validate_sampling(cfg) -> None:
    """Shared by generate and chat: name the flag and the valid range."""
    if not cfg.model:
        raise AuraError(M("need_model"))
    checks = [
        ("--max-new-tokens", cfg.max_new_tokens >= 1, "≥ 1", cfg.max_new_tokens),
        ("--temperature", cfg.temperature >= 0, "≥ 0", cfg.temperature),
        ("--top-k", cfg.top_k >= 0, "≥ 0", cfg.top_k),
        ("--top-p", 0 < cfg.top_p <= 1, "0 < p ≤ 1", cfg.top_p),
        ("--repetition-penalty", cfg.repetition_penalty > 0, "> 0", cfg.repetition_penalty),
    ]
    for field, ok, expected, value in checks:
        if not ok:
            raise AuraError(M("bad_value", field=field, expected=expected, value=value))


def sampling_of(cfg):
    import dataclasses

    from aura.inference.backends import Sampling

    default = next(f.default for f in dataclasses.fields(SamplingArgs) if f.name == "max_new_tokens")
    return Sampling(
        max_new_tokens=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        top_p=cfg.top_p,
        repetition_penalty=cfg.repetition_penalty,
        seed=cfg.seed,
        asked=cfg.max_new_tokens != default,
    )  # the default length is fitted without a word


def read_prompts(path: Path) -> list[str]:
    """Prompts of a text file (one per non-empty line) or a JSONL file; exact error on bad bytes."""
    if not path.is_file():
        raise AuraError(M("no_file", path=path))
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(M("not_utf8", path=path, offset=e.start, line=raw[: e.start].count(b"\n") + 1)) from None
    prompts = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix.lower() == ".jsonl":
            try:
                prompts.append(str(loads_json(line)["prompt"]))
            except (ValueError, KeyError, TypeError) as e:
                raise AuraError(M("bad_jsonl", path=path, line=n, err=e)) from None
        else:
            prompts.append(line.rstrip("\r"))
    if not prompts:
        raise AuraError(M("empty", path=path))
    return prompts


def run_one(engine, prompt: str, *, chat: bool, system: str, sampling, echo: bool) -> dict:
    messages = None
    if chat:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    out: list = []
    t0 = time.perf_counter()
    for piece in engine.stream(prompt=prompt, messages=messages, sampling=sampling, out=out):
        if echo:
            sys.stdout.write(piece)
            sys.stdout.flush()
    seconds = time.perf_counter() - t0
    res = out[0]
    return {
        "prompt": prompt,
        "output": res.text,
        "tokens": res.tokens,
        "seconds": round(seconds, 4),
        "tokens_per_s": round(res.tokens / seconds, 2) if seconds > 0 else 0.0,
        "model": engine.name,
    }


ROW_KEYS = {"prompt", "output", "tokens", "seconds", "tokens_per_s", "model"}  # one line of --output


def is_generations_file(path: Path, *, max_bytes: int = 256 << 20) -> bool:
    """True for a JSONL file ``aura generate`` wrote: every line an object with exactly its row keys."""
    try:
        if path.stat().st_size > max_bytes:
            return False
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return bool(lines) and all(set(json.loads(line)) == ROW_KEYS for line in lines)
    except (OSError, ValueError, TypeError):
        return False


def run_batched(engine, prompts: list[str], *, cfg: GenerateConfig, sampling) -> list[dict]:
    """The rows of a prompts file answered in batches (``HFEngine.batch``), in the file's order. A row's
    ``seconds`` is its batch's, and ``tokens_per_s`` the batch's tokens over them."""
    chats = None
    if cfg.chat:
        chats = [
            ([{"role": "system", "content": cfg.system}] if cfg.system else []) + [{"role": "user", "content": p}]
            for p in prompts
        ]
    rows: dict[int, dict] = {}
    for chunk, results, seconds in engine.batch(prompts, chats=chats, sampling=sampling):
        tps = sum(r.tokens for r in results) / seconds if seconds > 0 else 0.0
        for i, res in zip(chunk, results):
            rows[i] = {
                "prompt": prompts[i],
                "output": res.text,
                "tokens": res.tokens,
                "seconds": round(seconds, 4),
                "tokens_per_s": round(tps, 2),
                "model": engine.name,
            }
            console.info(M("progress", i=len(rows), n=len(prompts), tokens=res.tokens, seconds=seconds, tps=tps))
    return [rows[i] for i in range(len(prompts))]


def generate(cfg: GenerateConfig) -> int:
    from aura.core.atomic import atomic_write_text, check_writable
    from aura.inference.backends import open_engine

    if not cfg.prompt and not cfg.prompts_file:
        raise AuraError(M("need_prompt"))
    prompts = read_prompts(Path(cfg.prompts_file)) if cfg.prompts_file else [cfg.prompt]
    output = (
        Path(cfg.output) if cfg.output else (Path(cfg.output_dir) / "generations.jsonl" if cfg.output_dir else None)
    )
    if output is not None:
        from aura.core.ownership import check_output_file

        flag = "--output" if cfg.output else "--output-dir"
        check_writable(output, flag=flag)
        check_output_file(
            output,
            flag=flag,
            overwrite=cfg.overwrite,
            ours=is_generations_file,
            inputs=[cfg.model, cfg.adapter, cfg.prompts_file],
        )
    engine = open_engine(
        cfg.model, cfg.adapter, dtype=cfg.dtype, n_ctx=cfg.n_ctx, seed=cfg.seed, allow_other_base=cfg.allow_other_base
    )
    if cfg.chat and not engine.has_template:
        console.warn(M("no_template"))
    sampling = sampling_of(cfg)
    single = not cfg.prompts_file
    batched = not single and getattr(engine, "batch", None) is not None and cfg.repetition_penalty == 1
    rows = run_batched(engine, prompts, cfg=cfg, sampling=sampling) if batched else []
    for i, prompt in enumerate([] if batched else prompts, 1):
        if single:
            print(prompt if not cfg.chat else "", end="", flush=True)
        row = run_one(engine, prompt, chat=cfg.chat, system=cfg.system, sampling=sampling, echo=single)
        rows.append(row)
        if single:
            print()
            console.info(M("stats", tokens=row["tokens"], seconds=row["seconds"], tps=row["tokens_per_s"]))
        else:
            console.info(
                M(
                    "progress",
                    i=i,
                    n=len(prompts),
                    tokens=row["tokens"],
                    seconds=row["seconds"],
                    tps=row["tokens_per_s"],
                )
            )
    if output is not None:
        atomic_write_text(output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        console.success(M("written", n=len(rows), path=output))
    elif not single:
        for r in rows:
            print(json.dumps(r, ensure_ascii=False))
    return 0
