"""The command registry: each ``aura`` command is one ``Command``, the one place that says what it is.

Only the module of the command being run is imported, so ``aura --help`` is instant and a command
never pays for another's imports. A new command is one entry here. It lives in ``aura.core`` (data only,
no imports) so that the CLI, the pipeline runner and the Studio read the same table; ``aura.cli.commands``
re-exports it. Every fact about a command that another room needs (can it be a pipeline stage, where it
writes, does it resume in its own folder, how the Studio's launch page offers it) is a field here: no other
table repeats a list of command names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StudioForm:
    """How the Studio's launch page offers a command: only commands with one can be launched from the page."""

    position: int  # its place in the page's command menu (the first is the one the page opens with)
    default_name: str  # the folder the form proposes (``demo``, then ``demo-2``... when it exists)
    essential: tuple[str, ...]  # the options a person sets first, in this order; the rest sit under "Avanzado"
    hidden: tuple[str, ...] = ()  # fields left out of the form: they would write, or run code, outside the runs folder
    inside: tuple[str, ...] = ()  # fields naming a model the command reads: it must be inside the runs folder


@dataclass(frozen=True)
class Command:
    """One command: its (module, config class, function), its help (es, en), and the facts other rooms ask."""

    module: str
    config: str
    function: str
    es: str
    en: str
    stage: bool = True  # it can be a stage of a pipeline (not the long-running or interactive ones)
    output: str | None = "output_dir"  # the field naming the folder it writes (a pipeline's DIR/STAGE); None: none
    run: bool = False  # it trains: its folder is a run (run.json, checkpoints); a pipeline may launch it
    resumes_in_place: bool = False  # run again with the same options, it resumes in its own folder
    studio: StudioForm | None = None  # how the Studio's launch page offers it; None: not launchable there

    @property
    def launchable(self) -> bool:
        """Whether the Studio's page can launch it."""
        return self.studio is not None


COMMANDS: dict[tuple[str, ...], Command] = {
    ("data", "prepare"): Command(
        "aura.data.prepare",
        "PrepareConfig",
        "prepare",
        "Convierte texto (txt, jsonl, csv, parquet, Hugging Face) en shards de tokens.",
        "Turn raw text (txt, jsonl, csv, parquet, Hugging Face) into token shards.",
        studio=StudioForm(
            position=2, default_name="datos", essential=("inputs", "tokenizer", "hf_dataset", "val_fraction")
        ),
    ),
    ("data", "curate"): Command(
        "aura.data.curate.curate_command",
        "CurateConfig",
        "curate",
        "Depura un rastreo web (WARC, HTML, jsonl) en shards limpios en español (datatrove).",
        "Curate a web crawl (WARC, HTML, jsonl) into clean Spanish shards (datatrove).",
        resumes_in_place=True,
    ),
    ("tokenizer", "train"): Command(
        "aura.tokenizer.train",
        "TokenizerTrainConfig",
        "train_tokenizer",
        "Entrena un tokenizador BPE a nivel de bytes para español.",
        "Train a byte-level BPE tokenizer for Spanish.",
    ),
    ("tokenizer", "extend"): Command(
        "aura.tokenizer.extend",
        "TokenizerExtendConfig",
        "extend_tokenizer",
        "Amplía un tokenizador BPE existente con los tokens en español que le faltan.",
        "Extend an existing BPE tokenizer with the Spanish tokens it lacks.",
    ),
    ("pretrain",): Command(
        "aura.train.pretrain",
        "PretrainConfig",
        "pretrain",
        "Preentrena un modelo GPT-2 o Llama desde cero (sin --data: demo completa).",
        "Pretrain a GPT-2 or Llama-style model from scratch (no --data: full demo).",
        run=True,
        studio=StudioForm(
            position=0,
            default_name="demo",
            essential=(
                "data",
                "tokenizer",
                "model_preset",
                "max_steps",
                "time_budget",
                "batch_size",
                "learning_rate",
                "device",
            ),
        ),
    ),
    ("finetune",): Command(
        "aura.train.finetune",
        "FinetuneConfig",
        "finetune",
        "Ajuste fino con LoRA, QLoRA o completo sobre datos de instrucciones.",
        "Fine-tune with LoRA, QLoRA or full SFT on instruction data.",
        run=True,
        studio=StudioForm(
            position=1,
            default_name="sft",
            essential=("base_model", "data", "method", "objective", "epochs", "max_steps", "learning_rate", "device"),
        ),
    ),
    ("generate",): Command(
        "aura.inference.generate",
        "GenerateConfig",
        "generate",
        "Genera texto con un modelo (un prompt o un archivo de prompts).",
        "Generate text with a model (one prompt or a prompts file).",
    ),
    ("chat",): Command(
        "aura.inference.chat",
        "ChatConfig",
        "chat",
        "Chat interactivo en la terminal (Hugging Face, adaptador o GGUF).",
        "Interactive terminal chat (Hugging Face, adapter or GGUF).",
        stage=False,
        output=None,
    ),
    ("eval",): Command(
        "aura.evaluation.evaluate",
        "EvalConfig",
        "evaluate",
        "Perplejidad y bits por byte de uno o varios modelos.",
        "Perplexity and bits-per-byte of one or several models.",
        studio=StudioForm(
            position=3,
            default_name="eval",
            essential=("model", "data", "suite", "tasks", "limit"),
            hidden=("output", "download_to"),
            inside=("model", "compare", "adapter"),
        ),
    ),
    ("merge",): Command(
        "aura.export.merge",
        "MergeConfig",
        "merge",
        "Fusiona un adaptador LoRA/QLoRA con su modelo base.",
        "Merge a LoRA/QLoRA adapter into its base model.",
    ),
    ("export", "gguf"): Command(
        "aura.export.gguf",
        "GGUFConfig",
        "export_gguf",
        "Exporta a GGUF para llama.cpp y Ollama, verificado en llama.cpp.",
        "Export to GGUF for llama.cpp and Ollama, verified in llama.cpp.",
        studio=StudioForm(
            position=4,
            default_name="gguf",
            essential=("model", "quant"),
            hidden=("outfile", "llama_cpp_dir", "verify_only"),
            inside=("model",),
        ),
    ),
    ("serve",): Command(
        "aura.serve.serve_command",
        "ServeConfig",
        "serve",
        "Sirve un modelo con una API compatible con OpenAI (transformers, vLLM o llama.cpp).",
        "Serve a model through an OpenAI-compatible API (transformers, vLLM or llama.cpp).",
        stage=False,
        output=None,
    ),
    ("push",): Command(
        "aura.publish.push_command",
        "PushConfig",
        "push",
        "Publica un modelo, un adaptador o archivos GGUF en el hub de Hugging Face con su tarjeta.",
        "Publish a model, an adapter or GGUF files on the Hugging Face Hub with their model card.",
        output=None,
    ),
    ("launch",): Command(
        "aura.cluster.launch",
        "LaunchConfig",
        "launch",
        "Lanza torchrun con NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT y GPUS_PER_NODE.",
        "Start torchrun from NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, GPUS_PER_NODE.",
        stage=False,
        output=None,
    ),
    ("check-dist",): Command(
        "aura.cluster.check",
        "CheckDistConfig",
        "check_dist",
        "Prueba la comunicación entre procesos: all_reduce, ancho de banda y diagnóstico.",
        "Test communication between ranks: all_reduce, bandwidth and diagnosis.",
        output=None,
    ),
    ("monitor",): Command(
        "aura.watch.monitor",
        "MonitorConfig",
        "monitor",
        "Uso de CPU, RAM y GPU en tiempo real.",
        "Live CPU, RAM and GPU usage.",
        stage=False,
        output=None,
    ),
    ("doctor",): Command(
        "aura.watch.doctor",
        "DoctorConfig",
        "doctor",
        "Revisa el entorno (Python, torch, CUDA, NCCL, extras) y qué elegiría 'auto'.",
        "Check the environment (Python, torch, CUDA, NCCL, extras) and what 'auto' would pick.",
    ),
    ("plot",): Command(
        "aura.watch.plot",
        "PlotConfig",
        "plot",
        "Gráfica PNG de pérdida, tasa de aprendizaje y tokens/s de una o varias ejecuciones.",
        "PNG plot of loss, learning rate and tokens/s of one or several runs.",
    ),
    ("runs",): Command(
        "aura.watch.runs",
        "RunsConfig",
        "list_runs",
        "Tabla de ejecuciones: estado, paso, mejor validación, checkpoint y cómo reanudar.",
        "Table of runs: status, step, best validation, checkpoint and how to resume.",
        stage=False,
        output=None,
    ),
    ("pipeline", "run"): Command(
        "aura.pipeline.pipeline_commands",
        "PipelineRunConfig",
        "pipeline_run",
        "Ejecuta un pipeline (YAML de etapas): reanuda, salta lo terminado y escribe el informe.",
        "Run a pipeline (a YAML of stages): resumes, skips what is done and writes the report.",
        stage=False,
    ),
    ("pipeline", "list"): Command(
        "aura.pipeline.pipeline_commands",
        "PipelineListConfig",
        "pipeline_list",
        "Lista los pipelines incluidos en Aura.",
        "List the pipelines shipped with Aura.",
        stage=False,
        output=None,
    ),
    ("pipeline", "show"): Command(
        "aura.pipeline.pipeline_commands",
        "PipelineShowConfig",
        "pipeline_show",
        "Muestra un pipeline incluido como YAML para copiarlo y editarlo.",
        "Print a shipped pipeline as YAML to copy and edit.",
        stage=False,
        output=None,
    ),
    ("pipeline", "plan"): Command(
        "aura.pipeline.pipeline_commands",
        "PipelinePlanConfig",
        "pipeline_plan",
        "Valida un pipeline y muestra sus comandos, pasos, tokens y una estimación de tiempo y coste.",
        "Validate a pipeline and show its commands, steps, tokens and a time and cost estimate.",
        stage=False,
        output=None,
    ),
    ("studio",): Command(
        "aura.studio.studio_command",
        "StudioConfig",
        "studio",
        "Página web para ver, comparar, lanzar, detener y reanudar ejecuciones.",
        "Web page to watch, compare, launch, stop and resume runs.",
        stage=False,
        output=None,
    ),
}
