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
from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages, num
from aura.evaluation.results import group_members
from aura.evaluation.task_scores import M as RM

M = Messages(
    "evaluate",
    {
        "need_model": ("Falta --model (uno o varios directorios).", "--model is missing (one or more dirs)."),
        "need_data": (
            "Falta qué evaluar: --data (directorio preparado o archivos de texto), --suite (aura-es, "
            "es-estandar, es-estandar-rapida), --tasks, --prompts o --judge.",
            "Nothing to evaluate: give --data (prepared dir or text files), --suite (aura-es, es-estandar, "
            "es-estandar-rapida), --tasks, --prompts or --judge.",
        ),
        "adapter_one": (
            "--adapter se aplica a un solo --model (recibidos {n}).",
            "--adapter applies to a single --model (got {n}).",
        ),
        "bad_value": ("{field} debe ser {expected} (recibido {value}).", "{field} must be {expected} (got {value})."),
        "no_effect": (
            "{flag} solo se aplica con {needs}, que no se dio: no tendría ningún efecto. Quita {flag} o añade {needs}.",
            "{flag} only applies with {needs}, which was not given: it would have no effect. Drop {flag} "
            "or add {needs}.",
        ),
        "suite_or_tasks": ("--suite o --tasks", "--suite or --tasks"),
        "judge_one": (
            "--judge compara un solo --model con --baseline (recibidos {n}, o un --adapter): para comparar otro "
            "modelo, lanza otra evaluación (o fusiona el adaptador con aura merge).",
            "--judge compares a single --model with --baseline (got {n}, or an --adapter): to compare another "
            "model, run another evaluation (or merge the adapter with aura merge).",
        ),
        "judge_baseline": (
            "--judge necesita --baseline: la carpeta del modelo de referencia o un archivo con sus respuestas.",
            "--judge needs --baseline: the reference model's folder or a file of its answers.",
        ),
        "judge_output": (
            "--output nombra los resultados de --data, --suite, --tasks o --prompts; el juez escribe sus "
            "veredictos en --judge-out (y el resumen al lado, con .json). Usa --judge-out.",
            "--output names the results of --data, --suite, --tasks or --prompts; the judge writes its verdicts "
            "to --judge-out (and the summary beside it, with .json). Use --judge-out.",
        ),
        "group_needs_tasks": (
            "--model {group}: un grupo de modelos (una receta con varias semillas) se puntúa con --suite o "
            "--tasks, sin --data; para la perplejidad, da cada modelo por separado.",
            "--model {group}: a group of models (one recipe, several seeds) is scored with --suite or --tasks, "
            "without --data; for perplexity, give each model on its own.",
        ),
        "no_data": ("No existe {path}.", "{path} does not exist."),
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
class EvalConfig:
    model: list[str] = arg(
        [],
        es="Uno o varios modelos (directorio final/, fusionado, adaptador o checkpoint); A1,A2,A3 (separados "
        "por comas) es una receta entrenada con varias semillas, puntuada como un modelo.",
        en="One or more models (final/ dir, merged, adapter or checkpoint); A1,A2,A3 (comma-separated) is one "
        "recipe trained with several seeds, scored as one model.",
    )
    compare: list[str] = arg(
        [],
        es="Más modelos para la misma tabla; con --suite o --tasks, cada uno frente al "
        "primero: ¿la diferencia supera su error estándar combinado (pareado si comparten "
        "ítems) o es ruido?",
        en="More models for the same table; with --suite or --tasks, each against the first: "
        "is the difference larger than its combined standard error (paired when they share "
        "items), or noise?",
    )
    seeds: int = arg(
        1,
        es="Repite cada tarea de --tasks o de --suite es-estandar[-rapida] con N semillas (las de lm-eval: "
        "ejemplos few-shot y muestreo) y promedia cada ítem; la tabla muestra la dispersión entre semillas y "
        "--compare la suma al error. Para semillas de entrenamiento, da un grupo como un modelo: --model A1,A2,A3.",
        en="Repeat every task of --tasks or --suite es-estandar[-rapida] with N seeds (lm-eval's: few-shot examples "
        "and sampling) and average each item; the table shows the spread between seeds and --compare adds it to "
        "the error. For training seeds, give a group as one model: --model A1,A2,A3.",
    )
    adapter: str = arg("", es="Adaptador LoRA que se aplica sobre --model.", en="LoRA adapter applied on --model.")
    data: str = arg(
        "",
        es="Directorio preparado (aura data prepare), archivo de texto o directorio de .txt.",
        en="Prepared dir (aura data prepare), text file or dir of .txt files.",
    )
    suite: str = arg(
        "",
        es="Batería de tareas: aura-es (la de Aura, sin red: comprensión lectora, causa y efecto, "
        "gramática y conocimiento; también bits por byte y fertilidad), es-estandar (tareas estándar "
        "de lm-evaluation-harness en español) o es-estandar-rapida (cuatro de ellas, 250 ejemplos cada "
        "una).",
        en="Task suite: aura-es (Aura's own, offline: reading comprehension, cause and effect, grammar "
        "and knowledge; also bits per byte and fertility), es-estandar (standard Spanish "
        "lm-evaluation-harness tasks) or es-estandar-rapida (four of them, 250 examples each).",
        metavar="aura-es|es-estandar|es-estandar-rapida",
    )
    suite_data: str = arg(
        "",
        es="Directorio con los datos de --suite es-estandar[-rapida] para trabajar sin red: "
        "DIR/<dataset_path>/<dataset_name>/<partición>.jsonl (o .parquet) con las columnas del hub.",
        en="Folder holding the data of --suite es-estandar[-rapida], to work offline: "
        "DIR/<dataset_path>/<dataset_name>/<split>.jsonl (or .parquet) with the hub's columns.",
    )
    download_to: str = arg(
        "",
        es="Descarga del hub los datos de --suite es-estandar[-rapida] a este directorio (para "
        "--suite-data en un equipo sin red) y termina; no necesita --model.",
        en="Download the data of --suite es-estandar[-rapida] from the hub into this folder (for "
        "--suite-data on an offline machine) and stop; needs no --model.",
    )
    tasks: str = arg(
        "",
        es="Tareas de lm-evaluation-harness separadas por comas (p. ej. spanish_bench,"
        "global_mmlu_es; la mayoría descarga datos del hub de Hugging Face).",
        en="Comma-separated lm-evaluation-harness tasks (e.g. spanish_bench,global_mmlu_es; most "
        "download data from the Hugging Face hub).",
    )
    prompts: str = arg(
        "",
        es='Archivo de prompts (uno por línea, o JSONL con "prompt") que cada modelo responde '
        "de forma voraz; las respuestas se guardan en el JSON de resultados. Aura incluye unos "
        "en español: aura/resources/eval/prompts_es.txt (en un pipeline, aura:eval/prompts_es.txt).",
        en='Prompts file (one per line, or JSONL with "prompt") that each model answers greedily; '
        "the answers are stored in the results JSON. Aura ships Spanish ones: "
        "aura/resources/eval/prompts_es.txt (in a pipeline, aura:eval/prompts_es.txt).",
    )
    max_new_tokens: int = arg(
        48, es="Máximo de tokens de cada respuesta a --prompts.", en="At most this many tokens per --prompts answer."
    )
    judge: str = arg(
        "",
        es="URL de un servidor compatible con OpenAI que hace de juez (aura serve, vLLM, servidor de "
        "llama.cpp o una API alojada, p. ej. http://127.0.0.1:8000/v1): compara las respuestas de --model "
        "con las de --baseline a las preguntas de --judge-prompts, en los dos órdenes. La clave, si hace "
        "falta, se lee de AURA_JUDGE_API_KEY u OPENAI_API_KEY.",
        en="URL of an OpenAI-compatible server acting as judge (aura serve, vLLM, llama.cpp's server or a "
        "hosted API, e.g. http://127.0.0.1:8000/v1): it compares --model's answers with --baseline's to the "
        "--judge-prompts prompts, in both orders. A key, if needed, is read from AURA_JUDGE_API_KEY or "
        "OPENAI_API_KEY.",
        metavar="URL",
    )
    judge_model: str = arg(
        "",
        es="Nombre del modelo juez en el servidor (por defecto, el único que lista /v1/models).",
        en="The judge model's name on the server (default: the only one /v1/models lists).",
    )
    baseline: str = arg(
        "",
        es="Con --judge: el modelo de referencia (una carpeta de modelo) o un archivo con sus respuestas "
        '(JSONL con "id" y "answer", o el JSON de aura eval --prompts).',
        en="With --judge: the reference model (a model folder) or a file of its answers (JSONL with "
        '"id" and "answer", or the JSON of aura eval --prompts).',
    )
    judge_prompts: str = arg(
        "",
        es="Preguntas para el juez (JSONL con id, category, prompt y notes opcional; por defecto las de "
        "Aura en español: aura/resources/eval/judge_es.jsonl).",
        en="Prompts for the judge (JSONL with id, category, prompt and optional notes; default: Aura's "
        "Spanish ones, aura/resources/eval/judge_es.jsonl).",
    )
    judge_out: str = arg(
        "",
        es="Archivo JSONL con cada veredicto (por defecto MODELO.eval-judge.jsonl junto al modelo); si ya "
        "existe, se reanuda: no se vuelve a preguntar lo que ya tiene. El resumen va al mismo nombre con .json.",
        en="JSONL file of every verdict (default MODEL.eval-judge.jsonl beside the model); if it exists, the "
        "run resumes: what it holds is not asked again. The summary goes to the same name with .json.",
    )
    judge_max_tokens: int = arg(
        512, es="Máximo de tokens de cada respuesta del juez.", en="At most this many tokens per judge reply."
    )
    judge_attempts: int = arg(
        3,
        es="Intentos por petición al juez: una respuesta sin veredicto válido o un fallo de conexión se "
        "repite hasta este número de veces (con espera creciente si es la conexión).",
        en="Attempts per judge request: a reply without a valid verdict or a connection failure is retried "
        "up to this many times in all (with a growing wait for the connection).",
    )
    judge_timeout: float = arg(
        120.0, es="Segundos de espera por respuesta del juez.", en="Seconds to wait for each judge reply."
    )
    include_path: list[str] = arg(
        [], es="Directorios con tareas YAML propias para --tasks.", en="Dirs of your own YAML tasks for --tasks."
    )
    trust_task_code: bool = arg(
        False,
        es="Permite que las tareas de --include-path ejecuten código (archivos .py, "
        "etiquetas !function, trust_remote_code): se ejecuta con tus permisos; solo para "
        "directorios de confianza.",
        en="Let --include-path tasks run code (.py files, !function tags, "
        "trust_remote_code): it runs with your permissions; only for trusted dirs.",
    )
    limit: int = arg(
        0,
        es="Como mucho N ejemplos por tarea (0 = todos), para una prueba rápida.",
        en="At most N examples per task (0 = all), for a quick look.",
    )
    device: str = arg(
        "auto",
        es="Dispositivo para --suite/--tasks (auto, cpu, cuda, cuda:1...).",
        en="Device for --suite/--tasks (auto, cpu, cuda, cuda:1...).",
    )
    split: str = arg("val", es="Partición del directorio preparado.", en="Split of the prepared dir.")
    seq_len: int = arg(
        0,
        es="Longitud de ventana (0 = contexto del modelo, máx. 1024).",
        en="Window length (0 = the model's context, at most 1024).",
    )
    stride: int = arg(
        0,
        es="Avance entre ventanas (0 = --seq-len, bloques disjuntos).",
        en="Step between windows (0 = --seq-len, disjoint blocks).",
    )
    max_tokens: int = arg(
        0,
        es="Evaluar como mucho estos tokens de los datos (0 = todos).",
        en="Evaluate at most this many data tokens (0 = all).",
    )
    batch_size: int = arg(4, es="Ventanas por lote.", en="Windows per batch.")
    dtype: str = arg("float32", es="Tipo de los pesos.", en="Weight dtype.", choices=("float32", "bfloat16", "float16"))
    output: str = arg(
        "",
        es="Archivo JSON de resultados (por defecto OUTPUT_DIR/eval.json).",
        en="Results JSON file (default OUTPUT_DIR/eval.json).",
    )
    output_dir: str = arg("", es="Directorio de resultados.", en="Results dir.")
    overwrite: bool = arg(
        False,
        es="Sustituir un archivo de resultados existente que no escribió Aura.",
        en="Replace an existing results file that Aura did not write.",
    )
    allow_other_base: bool = arg(
        False,
        es="Evaluar un adaptador aunque se entrenara sobre otro modelo base (distinto config.json o embeddings).",
        en="Evaluate an adapter even if it was trained on another base model (different config.json or embeddings).",
    )

    @property
    def members(self) -> list[str]:
        """Every model folder, a group's (``A1,A2,A3``) one by one."""
        return [m for name in self.models for m in group_members(name)]

    def __post_init__(self):
        from aura.evaluation.standard_suite import SUITES, check_suite

        self.models = [*self.model, *self.compare]
        if self.suite:
            check_suite(self.suite)
        standard = self.suite in SUITES
        if self.download_to and not standard:
            raise AuraError(M("no_effect", flag="--download-to", needs="--suite es-estandar[-rapida]"))
        if not self.models and not self.download_to:
            raise AuraError(M("need_model"))
        if not (self.data or self.suite or self.tasks or self.prompts or self.judge):
            raise AuraError(M("need_data"))
        for flag, given, applies, needs in (
            ("--suite-data", bool(self.suite_data), standard, "--suite es-estandar[-rapida]"),
            ("--include-path", bool(self.include_path), bool(self.tasks), "--tasks"),
            ("--trust-task-code", self.trust_task_code, bool(self.tasks), "--tasks"),
            ("--limit", self.limit != 0, bool(self.suite or self.tasks), M("suite_or_tasks")),
            ("--split", self.split != "val", bool(self.data), "--data"),
            ("--seq-len", self.seq_len != 0, bool(self.data), "--data"),
            ("--stride", self.stride != 0, bool(self.data), "--data"),
            ("--max-tokens", self.max_tokens != 0, bool(self.data), "--data"),
            ("--max-new-tokens", self.max_new_tokens != 48, bool(self.prompts or self.judge), "--prompts/--judge"),
            *self._judge_flags(),
            ("--seeds", self.seeds != 1, bool(self.tasks) or standard, "--tasks / --suite es-estandar[-rapida]"),
        ):
            if given and not applies:  # a flag the others make pointless is refused, never ignored silently
                raise AuraError(M("no_effect", flag=flag, needs=needs))
        if self.adapter and len(self.members) != 1:
            raise AuraError(M("adapter_one", n=len(self.members)))
        groups = [name for name in self.models if "," in name]
        if groups and (self.data or not (self.suite or self.tasks)):
            raise AuraError(M("group_needs_tasks", group=groups[0]))
        for field, value, ok, expected in (
            ("--seq-len", self.seq_len, self.seq_len >= 0, "≥ 0"),
            ("--stride", self.stride, self.stride >= 0, "≥ 0"),
            ("--max-tokens", self.max_tokens, self.max_tokens >= 0, "≥ 0"),
            ("--limit", self.limit, self.limit >= 0, "≥ 0"),
            ("--batch-size", self.batch_size, self.batch_size >= 1, "≥ 1"),
            ("--max-new-tokens", self.max_new_tokens, self.max_new_tokens >= 1, "≥ 1"),
            ("--judge-max-tokens", self.judge_max_tokens, self.judge_max_tokens >= 1, "≥ 1"),
            ("--judge-attempts", self.judge_attempts, self.judge_attempts >= 1, "≥ 1"),
            ("--judge-timeout", self.judge_timeout, self.judge_timeout > 0, "> 0"),
            ("--seeds", self.seeds, 1 <= self.seeds <= 100, "1…100"),
        ):
            if not ok:
                raise AuraError(M("bad_value", field=field, value=value, expected=expected))
        if self.seq_len and self.stride > self.seq_len:
            raise AuraError(M("bad_value", field="--stride", value=self.stride, expected=f"≤ {self.seq_len}"))
        if self.judge:
            self._check_judge()
        if self.include_path:  # task code is refused before any model is loaded
            from aura.evaluation.harness import check_include_paths

            check_include_paths(self.include_path, trust_task_code=self.trust_task_code)

    def _judge_flags(self) -> list[tuple]:
        """The --judge options, each refused without --judge."""
        return [
            (flag, given, bool(self.judge), "--judge")
            for flag, given in (
                ("--judge-model", bool(self.judge_model)),
                ("--baseline", bool(self.baseline)),
                ("--judge-prompts", bool(self.judge_prompts)),
                ("--judge-out", bool(self.judge_out)),
                ("--judge-max-tokens", self.judge_max_tokens != 512),
                ("--judge-attempts", self.judge_attempts != 3),
                ("--judge-timeout", self.judge_timeout != 120.0),
            )
        ]

    def _check_judge(self) -> None:
        from aura.evaluation.judge_client import api_root

        api_root(self.judge)  # an address that is not http(s) is refused here
        if len(self.members) != 1 or self.adapter:  # one model: not several, nor a group of seeds
            raise AuraError(M("judge_one", n=len(self.members)))
        if not self.baseline:
            raise AuraError(M("judge_baseline"))
        if self.output and not (self.data or self.suite or self.tasks or self.prompts):
            raise AuraError(M("judge_output"))  # it would name nothing: refused, never ignored
        if not Path(self.baseline).exists():
            raise AuraError(M("no_data", path=self.baseline))


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
        raise AuraError(M("no_data", path=path))
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
