"""``aura eval``'s options (``EvalConfig``) and the checks that refuse a pointless or contradictory set of them
before any model loads: every flag that another flag makes meaningless is refused, never ignored.

The command itself (perplexity, bits-per-byte, suites, tasks, the judge) is ``aura.evaluation.evaluate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aura.core.config import arg
from aura.core.errors import AuraError
from aura.core.i18n import Messages
from aura.evaluation.results import group_members

M = Messages(
    "eval_config",
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
