"""``aura eval``: perplexity and bits-per-byte of one or several models on the same text.

Bits-per-byte = total NLL (nats) / (ln 2 × UTF-8 bytes of the evaluated text): unlike perplexity it
does not depend on the tokenizer, so models with different vocabularies compare fairly. The text is
either a prepared dir (``aura data prepare``; ``--split val`` by default: its tokens are decoded to
count bytes, and re-tokenised for a model whose tokenizer differs) or raw text files. Every token of
the text is scored: the stream starts with the model's BOS/EOS as context, windows of ``--seq-len``
advance by ``--stride`` (= seq-len: disjoint blocks; smaller: sliding, each token scored once with
more context). Works on final dirs, merged models, adapters and checkpoints.

Task accuracy: ``--suite aura-es`` scores Aura's offline Spanish suite with its batched scorer, and
``--tasks spanish_bench,global_mmlu_es`` runs lm-evaluation-harness tasks (``aura.evaluation``); both can be
combined with ``--data`` in one call.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from aura import __version__ as aura_version
from aura.core import console
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.evaluation.eval_config import EvalConfig, M as CM
from aura.evaluation.task_scores import M as RM

M = Messages(
    "evaluate",
    {
        "no_text": ("{path} no contiene archivos .txt.", "{path} contains no .txt files."),
        "not_utf8": (
            "{path} no está en UTF-8: el byte {offset} no es válido.",
            "{path} is not UTF-8: byte {offset} is invalid.",
        ),
        "too_long": (
            "--seq-len {seq} supera el contexto del modelo {model} ({ctx}). Usa --seq-len {ctx} o menos.",
            "--seq-len {seq} exceeds the context of model {model} ({ctx}). Use --seq-len {ctx} or less.",
        ),
        "few": (
            "El texto tiene solo {n:token|tokens} para {model}; hacen falta al menos 2.",
            "The text has only {n:token|tokens} for {model}; at least 2 are needed.",
        ),
        "evaluating": (
            "Evaluando {model}: {tokens:token|tokens}, {bytes:byte|bytes}, ventanas de {seq} (paso {stride})…",
            "Evaluating {model}: {tokens:token|tokens}, {bytes:byte|bytes}, windows of {seq} (stride {stride})…",
        ),
        "retok": (
            "El tokenizador de {model} no es el de los datos: se decodifica el texto y se re-tokeniza.",
            "{model}'s tokenizer is not the data's: the text is decoded and re-tokenised.",
        ),
        "title": ("Evaluación en {data}", "Evaluation on {data}"),
        "h_model": ("modelo", "model"),
        "h_ppl": ("perplejidad", "perplexity"),
        "written": ("Resultados en {path}.", "Results written to {path}."),
    },
)


@dataclass
class EvalText:
    """The text every model is scored on: documents, plus (for prepared data) its own tokens."""

    documents: list[str]
    n_bytes: int
    tokens: list[int] | None = None  # the prepared dir's tokens (documents joined by EOS)
    tokenizer_dir: Path | None = None  # the tokenizer that produced them


def _decode_utf8(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AuraError(M("not_utf8", path=path, offset=e.start)) from None


def load_text(data: str, *, split: str, max_tokens: int) -> EvalText:
    from aura.data.tokens import TokenShards, is_prepared_dir

    path = Path(data)
    if not path.exists():
        raise AuraError(CM("no_data", path=path))
    if is_prepared_dir(path):
        from transformers import AutoTokenizer

        shards = TokenShards(path, split)
        n = len(shards) if not max_tokens else min(max_tokens, len(shards))
        ids = shards.read(0, n).tolist()
        tok_dir = path / "tokenizer"
        tok = AutoTokenizer.from_pretrained(str(tok_dir))
        docs, cur = [], []
        for t in ids + [shards.eos_id]:
            if t == shards.eos_id:
                if cur:
                    docs.append(tok.decode(cur))
                cur = []
            else:
                cur.append(t)
        docs = [d for d in docs if d]
        return EvalText(docs, sum(len(d.encode("utf-8")) for d in docs), tokens=ids, tokenizer_dir=tok_dir)
    files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
    if not files:
        raise AuraError(M("no_text", path=path))
    docs = [_decode_utf8(f) for f in files]
    return EvalText(docs, sum(len(d.encode("utf-8")) for d in docs))


def token_stream(text: EvalText, tok, *, max_tokens: int) -> tuple[list[int], int]:
    """(ids with a leading context token, bytes of the text those ids cover)."""
    same = text.tokenizer_dir is not None and _same_tokenizer(text.tokenizer_dir, tok)
    if same:
        ids = list(text.tokens)
        n_bytes = text.n_bytes
    else:
        ids = []
        for d in text.documents:
            ids += tok(d, add_special_tokens=False)["input_ids"]
            if text.tokens is not None:  # prepared data: documents end with EOS, as in the shards
                ids.append(tok.eos_token_id)
        n_bytes = text.n_bytes
        if max_tokens and len(ids) > max_tokens and text.tokens is None:
            ids = ids[:max_tokens]
            n_bytes = len(tok.decode(ids, skip_special_tokens=True).encode("utf-8"))
    start = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    return [start, *ids], n_bytes


def _same_tokenizer(tok_dir: Path, tok) -> bool:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tok_dir)).get_vocab() == tok.get_vocab()


def windows(n: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored target) over a stream of n ids: inputs s[b:e], targets s[b+1:e+1]."""
    out, scored = [], 0
    for b in range(0, n - 1, stride):
        e = min(b + seq_len, n - 1)
        out.append((b, e, max(scored, b)))
        scored = e
        if e == n - 1:
            break
    return out


def score(model, ids: list[int], *, seq_len: int, stride: int, batch_size: int) -> tuple[float, int]:
    """(total NLL in nats, number of scored tokens) over every target of ``ids[1:]``."""
    import torch

    stream = torch.tensor(ids, dtype=torch.long)
    total, count = 0.0, 0
    wins = windows(len(ids), seq_len, stride)
    i = 0
    while i < len(wins):
        size, j = wins[i][1] - wins[i][0], i
        while j < len(wins) and j - i < batch_size and wins[j][1] - wins[j][0] == size:
            j += 1  # a batch is consecutive windows of one length (only the last may be shorter)
        group = wins[i:j]
        inputs = torch.stack([stream[b:e] for b, e, _ in group])  # (B, T)
        targets = torch.stack([stream[b + 1 : e + 1] for b, e, _ in group])  # (B, T)
        with torch.no_grad():
            logits = model(inputs).logits.float()  # (B, T, vocab)
        nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
        for row, (b, _e, first) in enumerate(group):
            keep = nll[row, first - b :]  # targets already scored by an earlier window are skipped
            total += float(keep.double().sum())
            count += keep.numel()
        i += len(group)
    return total, count


def evaluate(cfg: EvalConfig) -> int:
    from aura.core.atomic import check_writable
    from aura.core.ownership import check_output_file
    from aura.evaluation.results import task_outputs

    if cfg.download_to:
        from aura.evaluation.standard_suite import download_suite

        download_suite(cfg.suite, cfg.download_to)
        return 0

    # every output, before any model is loaded: never an input, nor inside a model or data folder the command
    # reads; never a file Aura did not write (unless --overwrite; a task YAML of --include-path is not Aura's)
    inputs = [*cfg.members, cfg.adapter, cfg.data, cfg.prompts]
    outputs = task_outputs(cfg)
    if cfg.data and (cfg.output or cfg.output_dir):
        outputs.append(
            (
                Path(cfg.output) if cfg.output else Path(cfg.output_dir) / "eval.json",
                "--output" if cfg.output else "--output-dir",
            )
        )
    for path, flag in outputs:
        if flag.startswith("--"):  # beside a model a write that fails is only a warning (aura.evaluation.task_scores)
            check_writable(path, flag=flag)
        check_output_file(path, flag=flag, overwrite=cfg.overwrite, inputs=inputs)
    if cfg.judge:
        from aura.evaluation.judge import judge_paths, verdicts_file_ours

        jsonl, summary = judge_paths(cfg)
        for path, flag, ours in ((jsonl, "--judge-out", verdicts_file_ours), (summary, "--judge-out", None)):
            check_writable(path, flag=flag)  # the JSONL is resumed (appended to) when it is Aura's
            check_output_file(
                path,
                flag=flag,
                overwrite=cfg.overwrite,
                inputs=[*inputs, cfg.baseline, cfg.judge_prompts],
                **({"ours": ours} if ours else {}),
            )
    if cfg.suite or cfg.tasks or cfg.prompts:
        from aura.evaluation.task_scores import evaluate_tasks

        evaluate_tasks(cfg)
    if cfg.data:
        evaluate_perplexity(cfg)
    if cfg.judge:
        from aura.evaluation.judge import run_judge

        run_judge(cfg)
    return 0


def evaluate_perplexity(cfg: EvalConfig) -> None:
    from aura.core.atomic import atomic_write_json
    from aura.inference.loading import load_hf, resolve_model
    from aura.models.presets import context_length

    text = load_text(cfg.data, split=cfg.split, max_tokens=cfg.max_tokens)
    results = []
    for name in cfg.models:
        source = resolve_model(name, cfg.adapter or None, allow_other_base=cfg.allow_other_base)
        if source.kind == "gguf":
            raise AuraError(RM("gguf", path=source.path))
        model, tok = load_hf(source, dtype=cfg.dtype)
        ctx = context_length(model.config) or 1024
        seq = cfg.seq_len or min(ctx, 1024)
        if seq > ctx:
            raise AuraError(M("too_long", seq=seq, model=name, ctx=ctx))
        stride = cfg.stride or seq
        if text.tokenizer_dir is not None and not _same_tokenizer(text.tokenizer_dir, tok):
            console.info(M("retok", model=name))
        ids, n_bytes = token_stream(text, tok, max_tokens=cfg.max_tokens)
        if len(ids) < 2:
            raise AuraError(M("few", n=len(ids) - 1, model=name))
        console.info(M("evaluating", model=name, tokens=len(ids) - 1, bytes=n_bytes, seq=seq, stride=stride))
        t0 = time.perf_counter()
        nll, count = score(model, ids, seq_len=seq, stride=stride, batch_size=cfg.batch_size)
        seconds = time.perf_counter() - t0
        loss = nll / count
        results.append(
            {
                "model": name,
                "tokens": count,
                "bytes": n_bytes,
                "nll_nats": nll,
                "loss": loss,
                "perplexity": math.exp(loss),
                "bits_per_byte": nll / (math.log(2) * n_bytes),
                "bytes_per_token": n_bytes / count,
                "seq_len": seq,
                "stride": stride,
                "seconds": seconds,
                "tokens_per_s": count / seconds if seconds else 0.0,
            }
        )
        del model
    console.table(
        M("title", data=cfg.data),
        [M("h_model"), "tokens", "loss", M("h_ppl"), "bits/byte", "bytes/token", "tokens/s"],
        [
            [
                r["model"],
                num(r["tokens"]),
                num(r["loss"], ".4f"),
                num(r["perplexity"], ".2f"),
                num(r["bits_per_byte"], ".4f"),
                num(r["bytes_per_token"], ".2f"),
                num(r["tokens_per_s"], ",.0f"),
            ]
            for r in results
        ],
    )
    out = Path(cfg.output) if cfg.output else (Path(cfg.output_dir) / "eval.json" if cfg.output_dir else None)
    if out is not None:
        atomic_write_json(
            out,
            {
                "data": cfg.data,
                "split": cfg.split,
                "max_tokens": cfg.max_tokens,
                "aura_version": aura_version,
                "results": results,
            },
        )
        console.success(M("written", path=out))
