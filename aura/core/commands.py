"""The command registry: each ``aura`` command is a (module, config dataclass, function) triple.

Only the module of the command being run is imported, so ``aura --help`` is instant and a command
never pays for another's imports. A new command is one entry here. It lives in ``aura.core`` (data only,
no imports) so that the CLI and the pipeline runner read the same table; ``aura.cli.commands`` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    module: str
    config: str
    function: str
    es: str
    en: str


COMMANDS: dict[tuple[str, ...], Command] = {
    ("data", "prepare"): Command(
        "aura.data.prepare", "PrepareConfig", "prepare",
        "Convierte texto (txt, jsonl, csv, parquet, Hugging Face) en shards de tokens.",
        "Turn raw text (txt, jsonl, csv, parquet, Hugging Face) into token shards."),
    ("data", "curate"): Command(
        "aura.data.curate.command", "CurateConfig", "curate",
        "Depura un rastreo web (WARC, HTML, jsonl) en shards limpios en español (datatrove).",
        "Curate a web crawl (WARC, HTML, jsonl) into clean Spanish shards (datatrove)."),
    ("tokenizer", "train"): Command(
        "aura.tokenizer.train", "TokenizerTrainConfig", "train_tokenizer",
        "Entrena un tokenizador BPE a nivel de bytes para español.",
        "Train a byte-level BPE tokenizer for Spanish."),
    ("tokenizer", "extend"): Command(
        "aura.tokenizer.extend", "TokenizerExtendConfig", "extend_tokenizer",
        "Amplía un tokenizador BPE existente con los tokens en español que le faltan.",
        "Extend an existing BPE tokenizer with the Spanish tokens it lacks."),
    ("pretrain",): Command(
        "aura.train.pretrain", "PretrainConfig", "pretrain",
        "Preentrena un modelo GPT-2 o Llama desde cero (sin --data: demo completa).",
        "Pretrain a GPT-2 or Llama-style model from scratch (no --data: full demo)."),
    ("finetune",): Command(
        "aura.train.finetune", "FinetuneConfig", "finetune",
        "Ajuste fino con LoRA, QLoRA o completo sobre datos de instrucciones.",
        "Fine-tune with LoRA, QLoRA or full SFT on instruction data."),
    ("generate",): Command(
        "aura.inference.generate", "GenerateConfig", "generate",
        "Genera texto con un modelo (un prompt o un archivo de prompts).",
        "Generate text with a model (one prompt or a prompts file)."),
    ("chat",): Command(
        "aura.inference.chat", "ChatConfig", "chat",
        "Chat interactivo en la terminal (Hugging Face, adaptador o GGUF).",
        "Interactive terminal chat (Hugging Face, adapter or GGUF)."),
    ("eval",): Command(
        "aura.evaluation.evaluate", "EvalConfig", "evaluate",
        "Perplejidad y bits por byte de uno o varios modelos.",
        "Perplexity and bits-per-byte of one or several models."),
    ("merge",): Command(
        "aura.export.merge", "MergeConfig", "merge",
        "Fusiona un adaptador LoRA/QLoRA con su modelo base.",
        "Merge a LoRA/QLoRA adapter into its base model."),
    ("export", "gguf"): Command(
        "aura.export.gguf", "GGUFConfig", "export_gguf",
        "Exporta a GGUF para llama.cpp y Ollama, verificado en llama.cpp.",
        "Export to GGUF for llama.cpp and Ollama, verified in llama.cpp."),
    ("serve",): Command(
        "aura.serve.command", "ServeConfig", "serve",
        "Sirve un modelo con una API compatible con OpenAI (transformers, vLLM o llama.cpp).",
        "Serve a model through an OpenAI-compatible API (transformers, vLLM or llama.cpp)."),
    ("push",): Command(
        "aura.publish.command", "PushConfig", "push",
        "Publica un modelo, un adaptador o archivos GGUF en el hub de Hugging Face con su tarjeta.",
        "Publish a model, an adapter or GGUF files on the Hugging Face Hub with their model card."),
    ("launch",): Command(
        "aura.cluster.launch", "LaunchConfig", "launch",
        "Lanza torchrun con NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT y GPUS_PER_NODE.",
        "Start torchrun from NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT, GPUS_PER_NODE."),
    ("check-dist",): Command(
        "aura.cluster.check", "CheckDistConfig", "check_dist",
        "Prueba la comunicación entre procesos: all_reduce, ancho de banda y diagnóstico.",
        "Test communication between ranks: all_reduce, bandwidth and diagnosis."),
    ("monitor",): Command(
        "aura.watch.monitor", "MonitorConfig", "monitor",
        "Uso de CPU, RAM y GPU en tiempo real.",
        "Live CPU, RAM and GPU usage."),
    ("doctor",): Command(
        "aura.watch.doctor", "DoctorConfig", "doctor",
        "Revisa el entorno (Python, torch, CUDA, NCCL, extras) y qué elegiría 'auto'.",
        "Check the environment (Python, torch, CUDA, NCCL, extras) and what 'auto' would pick."),
    ("plot",): Command(
        "aura.watch.plot", "PlotConfig", "plot",
        "Gráfica PNG de pérdida, tasa de aprendizaje y tokens/s de una o varias ejecuciones.",
        "PNG plot of loss, learning rate and tokens/s of one or several runs."),
    ("runs",): Command(
        "aura.watch.runs", "RunsConfig", "list_runs",
        "Tabla de ejecuciones: estado, paso, mejor validación, checkpoint y cómo reanudar.",
        "Table of runs: status, step, best validation, checkpoint and how to resume."),
    ("pipeline", "run"): Command(
        "aura.pipeline.command", "PipelineRunConfig", "pipeline_run",
        "Ejecuta un pipeline (YAML de etapas): reanuda, salta lo terminado y escribe el informe.",
        "Run a pipeline (a YAML of stages): resumes, skips what is done and writes the report."),
    ("pipeline", "list"): Command(
        "aura.pipeline.command", "PipelineListConfig", "pipeline_list",
        "Lista los pipelines incluidos en Aura.",
        "List the pipelines shipped with Aura."),
    ("pipeline", "show"): Command(
        "aura.pipeline.command", "PipelineShowConfig", "pipeline_show",
        "Muestra un pipeline incluido como YAML para copiarlo y editarlo.",
        "Print a shipped pipeline as YAML to copy and edit."),
    ("pipeline", "plan"): Command(
        "aura.pipeline.command", "PipelinePlanConfig", "pipeline_plan",
        "Valida un pipeline y muestra sus comandos, pasos, tokens y una estimación de tiempo y coste.",
        "Validate a pipeline and show its commands, steps, tokens and a time and cost estimate."),
    ("studio",): Command(
        "aura.studio.command", "StudioConfig", "studio",
        "Página web para ver, comparar, lanzar, detener y reanudar ejecuciones.",
        "Web page to watch, compare, launch, stop and resume runs."),
}
