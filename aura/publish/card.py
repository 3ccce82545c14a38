"""The model card ``aura push`` writes: ``README.md`` with the Hub's YAML metadata, built with
huggingface_hub's own ``ModelCardData`` and ``EvalResult`` (so ``model-index`` is the Hub's format, not
hand-written YAML), and a body in Spanish followed by an English section.

The body says what only Aura knows (``aura.publish.facts``): the recipe, the data and its funnel, the
tokenizer's fertility, the hardware, device-hours and cost, the evaluations, and how to run the model.
Numbers are written each language's way (decimal comma in the Spanish part).
"""

from __future__ import annotations

from typing import Any

from aura.core.i18n import Messages, num

C = Messages(
    "publish.card",
    {
        "intro_model": (
            "Modelo de lenguaje ({arch}) entrenado con Aura (`aura {command}`).",
            "Language model ({arch}) trained with Aura (`aura {command}`).",
        ),
        "intro_model_plain": (
            "Modelo de lenguaje ({arch}) publicado con Aura.",
            "Language model ({arch}) published with Aura.",
        ),
        "intro_adapter": (
            "Adaptador {peft} para `{base}`, entrenado con Aura (`aura finetune`). Se carga "
            "sobre su modelo base con `peft`.",
            "{peft} adapter for `{base}`, trained with Aura (`aura finetune`). It is loaded on its "
            "base model with `peft`.",
        ),
        "intro_gguf": (
            "Archivos GGUF para `llama.cpp` y Ollama, exportados con Aura (`aura export gguf`).",
            "GGUF files for `llama.cpp` and Ollama, exported with Aura (`aura export gguf`).",
        ),
        "recipe": ("Receta", "Recipe"),
        "data": ("Datos", "Data"),
        "hardware": ("Hardware y coste", "Hardware and cost"),
        "evaluation": ("Evaluación", "Evaluation"),
        "usage": ("Cómo usarlo", "How to use it"),
        "h_field": ("campo", "field"),
        "h_value": ("valor", "value"),
        "h_task": ("tarea", "task"),
        "h_metric": ("métrica", "metric"),
        "h_source": ("archivo", "file"),
        "f_command": ("comando", "command"),
        "f_preset": ("preset", "preset"),
        "f_base": ("modelo base", "base model"),
        "f_method": ("método", "method"),
        "f_lora": ("LoRA (r, alfa)", "LoRA (r, alpha)"),
        "f_optimizer": ("optimizador", "optimizer"),
        "f_lr": ("tasa de aprendizaje", "learning rate"),
        "f_schedule": ("programa de la tasa", "schedule"),
        "f_warmup": ("pasos de calentamiento", "warm-up steps"),
        "f_min_lr": ("tasa mínima", "minimum rate"),
        "f_wd": ("decaimiento de pesos", "weight decay"),
        "f_batch": ("lote × acumulación × procesos", "batch × accumulation × processes"),
        "f_seq": ("longitud de secuencia", "sequence length"),
        "f_tps": ("tokens por paso", "tokens per step"),
        "f_steps": ("pasos", "steps"),
        "f_tokens": ("tokens vistos", "tokens seen"),
        "f_precision": ("precisión", "precision"),
        "f_loss": ("pérdida final (entrenamiento)", "final loss (train)"),
        "f_val": ("pérdida final (validación)", "final loss (validation)"),
        "f_seed": ("semilla", "seed"),
        "f_params": ("parámetros", "parameters"),
        "f_trainable": ("parámetros entrenados", "trained parameters"),
        "steps_of": ("{last} de {total}", "{last} of {total}"),
        "sources": ("Fuentes: {list}.", "Sources: {list}."),
        "hub_datasets": ("Conjuntos del hub: {list}.", "Hub datasets: {list}."),
        "instructions": (
            "Instrucciones: `{name}` ({train} de entrenamiento, {val} de validación).",
            "Instructions: `{name}` ({train} for training, {val} for validation).",
        ),
        "prepared": (
            "Datos preparados `{name}`: documentos leídos {read} → conservados {kept} (duplicados: {dup}, "
            "demasiado cortos: {short}); tokens: {train:,} de entrenamiento y {val:,} de validación.",
            "Prepared data `{name}`: documents read {read} → kept {kept} (duplicates: {dup}, too short: "
            "{short}); tokens: {train:,} for training and {val:,} for validation.",
        ),
        "curation": (
            "Depuración (`aura data curate`), documentos por paso: {steps}.",
            "Curation (`aura data curate`), documents per step: {steps}.",
        ),
        "tokenizer": (
            "Tokenizador `{name}`: vocabulario de {vocab}, fertilidad (tokens por palabra): {fert:.3f}.",
            "Tokenizer `{name}`: vocabulary of {vocab}, fertility (tokens per word): {fert:.3f}.",
        ),
        "pipeline_note": ("Etapa `{stage}` del pipeline: {note}.", "Pipeline stage `{stage}`: {note}."),
        "note_fert": (
            "vocabulario {vocab}, fertilidad {fert:.3f} tokens/palabra",
            "vocabulary {vocab}, fertility {fert:.3f} tokens/word",
        ),
        "note_docs": (
            "documentos {read} → {kept}, tokens {train:,} + {val:,} (val.)",
            "documents {read} → {kept}, tokens {train:,} + {val:,} (val)",
        ),
        "no_data": ("Aura no guarda aquí una descripción de los datos.", "Aura holds no description of the data here."),
        "device": (
            "Dispositivo: {device} × {count} ({nodes:nodo|nodos}, {procs:proceso|procesos}).",
            "Device: {device} × {count} ({nodes:node|nodes}, {procs:process|processes}).",
        ),
        "train_time": (
            "Entrenamiento: {seconds:,.0f} s, horas-dispositivo: {hours:.4f}; memoria pico {mem:.3f} GB.",
            "Training: {seconds:,.0f} s, {hours:.4f} device-hours; peak memory {mem:.3f} GB.",
        ),
        "pipeline_cost": (
            "Pipeline `{name}`: horas-dispositivo en total: {hours:.4f}, coste {cost} (precio {price}); "
            "esta etapa (`{stage}`), horas-dispositivo: {stage_hours:.4f}.",
            "Pipeline `{name}`: {hours:.4f} device-hours in total, cost {cost} (price {price}); this "
            "stage (`{stage}`): {stage_hours:.4f} device-hours.",
        ),
        "no_price": ("sin precio", "no price"),
        "price": ("{price} €/hora", "€{price}/hour"),
        "money": ("{value:.4f} €", "€{value:.4f}"),
        "environment": (
            "Entorno: Aura {aura}, Python {python}, torch {torch}, {platform}.",
            "Environment: Aura {aura}, Python {python}, torch {torch}, {platform}.",
        ),
        "no_hardware": (
            "Sin registro de la ejecución: hardware y coste desconocidos.",
            "No run record: hardware and cost unknown.",
        ),
        "no_eval": (
            "Aún sin evaluar. Evalúalo con `aura eval --model CARPETA --suite aura-es` y vuelve a publicarlo.",
            "Not evaluated yet. Evaluate it with `aura eval --model FOLDER --suite aura-es` and push it again.",
        ),
        "limit": ("{n:ejemplo|ejemplos} por tarea", "{n:example|examples} per task"),
        "use_transformers": ("Con `transformers`:", "With `transformers`:"),
        "use_peft": (
            "Con `transformers` y `peft` (descarga también el modelo base):",
            "With `transformers` and `peft` (the base model is downloaded too):",
        ),
        "use_llamacpp": ("Con `llama.cpp`:", "With `llama.cpp`:"),
        "use_ollama": ("Con Ollama:", "With Ollama:"),
        "use_aura": ("Con Aura (`aura chat`), tras descargarlo:", "With Aura (`aura chat`), after downloading it:"),
        "use_gguf_first": (
            "Para `llama.cpp` y Ollama, expórtalo a GGUF con `aura export gguf --model CARPETA` y "
            "publícalo con `aura push ... --gguf ARCHIVO.gguf`.",
            "For `llama.cpp` and Ollama, export it to GGUF with `aura export gguf --model FOLDER` and "
            "publish it with `aura push ... --gguf FILE.gguf`.",
        ),
        "use_merge_first": (
            "Para `llama.cpp` y Ollama, fusiónalo antes con `aura merge` y expórtalo con `aura export gguf`.",
            "For `llama.cpp` and Ollama, merge it first with `aura merge` and export it with `aura export gguf`.",
        ),
        "pushed": ("Publicado con `aura push`.", "Published with `aura push`."),
    },
)

TAGS = ["aura", "spanish", "text-generation"]


def _metric_entries(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per (task, dataset, metric) of the eval JSONs, in file order, without repeats."""
    rows, seen = [], set()
    for r in facts["evaluations"]:
        data = str(r.get("_data") or "val").rstrip("/").rsplit("/", 1)[-1]
        if "rows" in r:
            for row in r.get("rows") or []:
                if not isinstance(row, dict) or not isinstance(row.get("value"), (int, float)):
                    continue
                task = str(row.get("task"))
                entry = {
                    "task": task,
                    "dataset": "aura-es" if task.startswith("aura_es") else task,
                    "config": task,
                    "split": None,
                    "metric": str(row.get("metric")),
                    "value": row["value"],
                    "limit": r.get("limit") or None,
                    "file": r["_file"],
                }
                key = (entry["dataset"], task, entry["metric"], entry["limit"])
                if key not in seen:
                    seen.add(key)
                    rows.append(entry)
        else:
            for metric in ("bits_per_byte", "perplexity"):
                if isinstance(r.get(metric), (int, float)):
                    entry = {
                        "task": "language-modeling",
                        "dataset": data,
                        "config": None,
                        "split": "val",
                        "metric": metric,
                        "value": r[metric],
                        "limit": None,
                        "file": r["_file"],
                    }
                    key = (data, "language-modeling", metric, None)
                    if key not in seen:
                        seen.add(key)
                        rows.append(entry)
    return rows


def card_data(facts: dict[str, Any], *, repo_id: str, license: str):
    """The Hub's metadata, through huggingface_hub's own classes."""
    from huggingface_hub import EvalResult, ModelCardData

    results = [
        EvalResult(
            task_type="text-generation",
            task_name=e["task"],
            dataset_type=e["dataset"],
            dataset_name=e["dataset"] if e["config"] in (None, e["dataset"]) else f"{e['dataset']} ({e['config']})",
            dataset_config=e["config"],
            dataset_split=e["split"],
            dataset_args={"limit": e["limit"]} if e["limit"] else None,
            metric_type=e["metric"],
            metric_name=e["metric"],
            metric_value=e["value"],
        )
        for e in _metric_entries(facts)
    ]
    kind = facts["kind"]
    tags = list(TAGS)
    if kind == "adapter":
        tags += ["peft", "lora"]
    if kind == "gguf" or facts["gguf"]:
        tags.append("gguf")
    arch = facts["model"].get("model_type")
    if arch:
        tags.append(arch)
    data = facts.get("data") or {}
    library = {"adapter": "peft", "gguf": "gguf"}.get(kind, "transformers")
    return ModelCardData(
        language=["es"],
        license=license,
        base_model=facts.get("base_model"),
        datasets=data.get("datasets") or None,
        tags=tags,
        library_name=library,
        pipeline_tag="text-generation",
        model_name=repo_id.split("/", 1)[1],
        eval_results=results or None,
    )


def _v(value, lang: str, spec: str = ",") -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and spec == ",":
        spec = ",.6g"
    return (
        num(value, spec, lang=lang) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    )


def _table(heads: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
        *["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows],
        "",
    ]


def _recipe_rows(r: dict[str, Any], lang: str) -> list[list[str]]:
    def t(key):
        return C.in_lang(lang, key)

    rows = [[t("f_command"), f"`aura {r['command']}`" if r.get("command") else "–"]]
    if r.get("preset"):
        rows.append([t("f_preset"), f"{r['preset']} ({r.get('arch') or '?'})"])
    if r.get("base_model"):
        rows.append([t("f_base"), f"`{r['base_model']}`"])
    if r.get("method"):
        rows.append([t("f_method"), f"{r['method']} ({r.get('objective') or 'sft'})"])
    if r.get("lora"):
        rows.append([t("f_lora"), f"{r['lora'].get('lora_r')}, {r['lora'].get('lora_alpha')}"])
    if r.get("parameters"):
        rows.append([t("f_params"), _v(r["parameters"], lang)])
    if r.get("trainable_parameters"):
        rows.append([t("f_trainable"), _v(r["trainable_parameters"], lang)])
    rows += [
        [t("f_optimizer"), str(r.get("optimizer", "–"))],
        [t("f_lr"), _v(r.get("learning_rate"), lang, ".3g")],
        [t("f_schedule"), str(r.get("schedule") or "–")],
        [t("f_warmup"), _v(r.get("warmup_steps"), lang)],
        [t("f_min_lr"), _v(r.get("min_lr"), lang, ".3g")],
        [t("f_wd"), _v(r.get("weight_decay"), lang, ".3g")],
        [
            t("f_batch"),
            f"{_v(r.get('batch_size'), lang)} × {_v(r.get('gradient_accumulation_steps'), lang)} × "
            f"{_v(r.get('world_size'), lang)}",
        ],
        [t("f_seq"), _v(r.get("sequence_length"), lang)],
        [t("f_tps"), _v(r.get("tokens_per_step"), lang)],
        [
            t("f_steps"),
            C.in_lang(lang, "steps_of", last=_v(r.get("last_step"), lang), total=_v(r.get("total_steps"), lang)),
        ],
        [
            t("f_tokens"),
            _v(
                int(r["tokens"])
                if isinstance(r.get("tokens"), float) and r["tokens"].is_integer()
                else r.get("tokens"),
                lang,
            ),
        ],
        [t("f_precision"), str(r.get("precision") or "–")],
        [t("f_seed"), _v(r.get("seed"), lang)],
        [t("f_loss"), _v(r.get("final_train_loss"), lang, ".4f")],
        [t("f_val"), _v(r.get("final_val_loss"), lang, ".4f")],
    ]
    return rows


def _data_lines(facts: dict[str, Any], lang: str) -> list[str]:
    d = facts.get("data") or {}
    out = []
    if d.get("instructions"):
        ex = d.get("examples") or {}
        out.append(
            C.in_lang(
                lang,
                "instructions",
                name=d["instructions"],
                train=_v(ex.get("train"), lang),
                val=_v(ex.get("val"), lang),
            )
        )
    if d.get("sources"):
        out.append(
            C.in_lang(
                lang,
                "sources",
                list=", ".join(
                    f"`{s['name']}`" + (f" ({_v(s['bytes'], lang)} B)" if s.get("bytes") else "") for s in d["sources"]
                ),
            )
        )
    if d.get("datasets"):
        out.append(C.in_lang(lang, "hub_datasets", list=", ".join(f"`{x}`" for x in d["datasets"])))
    for p in d.get("prepared") or []:
        out.append(
            C.in_lang(
                lang,
                "prepared",
                name=p["name"],
                read=_v(p.get("documents_read"), lang),
                kept=_v(p.get("documents_kept"), lang),
                dup=_v(p.get("duplicates"), lang),
                short=_v(p.get("too_short"), lang),
                train=p.get("train_tokens") or 0,
                val=p.get("val_tokens") or 0,
            )
        )
    if d.get("curation"):
        out.append(
            C.in_lang(
                lang, "curation", steps=" → ".join(f"{s['stage']} {_v(s.get('docs_out'), lang)}" for s in d["curation"])
            )
        )
    tok = d.get("tokenizer")
    if tok and tok.get("fertility") is not None:
        out.append(
            C.in_lang(lang, "tokenizer", name=tok["name"], vocab=_v(tok.get("vocab_size"), lang), fert=tok["fertility"])
        )
    for s in (facts.get("cost") or {}).get("stages") or []:
        n = s.get("notes") or {}
        if n.get("fertility") is not None:
            out.append(
                C.in_lang(
                    lang,
                    "pipeline_note",
                    stage=s["name"],
                    note=C.in_lang(lang, "note_fert", vocab=_v(n.get("vocab_size"), lang), fert=n["fertility"]),
                )
            )
        if n.get("train_tokens") is not None:
            out.append(
                C.in_lang(
                    lang,
                    "pipeline_note",
                    stage=s["name"],
                    note=C.in_lang(
                        lang,
                        "note_docs",
                        read=_v(n.get("documents_read"), lang),
                        kept=_v(n.get("documents_kept"), lang),
                        train=n["train_tokens"],
                        val=n.get("val_tokens") or 0,
                    ),
                )
            )
    return [f"- {line}" for line in out] or [C.in_lang(lang, "no_data")]


def _hardware_lines(facts: dict[str, Any], lang: str) -> list[str]:
    hw, r, c = facts.get("hardware"), facts.get("recipe") or {}, facts.get("cost")
    out = []
    if hw:
        out.append(
            C.in_lang(
                lang,
                "device",
                device=hw.get("device") or hw.get("device_type"),
                count=hw.get("per_node") or 1,
                nodes=hw.get("nodes") or 1,
                procs=hw.get("processes") or 1,
            )
        )
    if isinstance(r.get("train_seconds"), (int, float)):
        hours = r["train_seconds"] * (r.get("world_size") or 1) / 3600
        out.append(
            C.in_lang(lang, "train_time", seconds=r["train_seconds"], hours=hours, mem=r.get("peak_memory_gb") or 0.0)
        )
    if c:
        price = (
            C.in_lang(lang, "price", price=c["price_per_hour"])
            if c.get("price_per_hour") is not None
            else C.in_lang(lang, "no_price")
        )
        cost = C.in_lang(lang, "money", value=c["cost"]) if c.get("cost") is not None else "–"
        out.append(
            C.in_lang(
                lang,
                "pipeline_cost",
                name=c.get("pipeline") or "?",
                hours=c["device_hours"],
                cost=cost,
                price=price,
                stage=c.get("stage") or "?",
                stage_hours=c.get("stage_device_hours") or 0.0,
            )
        )
        if isinstance(c.get("environment"), dict):
            env = c["environment"]
            out.append(
                C.in_lang(
                    lang,
                    "environment",
                    aura=env.get("aura"),
                    python=env.get("python"),
                    torch=env.get("torch"),
                    platform=env.get("platform"),
                )
            )
    return [f"- {line}" for line in out] or [C.in_lang(lang, "no_hardware")]


def _eval_lines(facts: dict[str, Any], lang: str) -> list[str]:
    entries = _metric_entries(facts)
    if not entries:
        return [C.in_lang(lang, "no_eval"), ""]
    rows = [
        [
            e["task"] + (f" ({C.in_lang(lang, 'limit', n=e['limit'])})" if e["limit"] else ""),
            e["metric"],
            _v(e["value"], lang, ".4f"),
            f"`{e['file']}`",
        ]
        for e in entries
    ]
    return _table(
        [
            C.in_lang(lang, "h_task"),
            C.in_lang(lang, "h_metric"),
            C.in_lang(lang, "h_value"),
            C.in_lang(lang, "h_source"),
        ],
        rows,
    )


def _usage_lines(facts: dict[str, Any], repo_id: str, lang: str) -> list[str]:
    name = repo_id.split("/", 1)[1]
    kind, gguf = facts["kind"], facts["gguf"]
    out: list[str] = []
    if kind == "model":
        out += [
            C.in_lang(lang, "use_transformers"),
            "",
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            f'tok = AutoTokenizer.from_pretrained("{repo_id}")',
            f'model = AutoModelForCausalLM.from_pretrained("{repo_id}")',
            'messages = [{"role": "user", "content": "¿Cuál es la capital de Perú?"}]',
            'ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")',
            "out = model.generate(ids, max_new_tokens=64)",
            "print(tok.decode(out[0][ids.shape[1]:], skip_special_tokens=True))",
            "```",
            "",
        ]
    elif kind == "adapter":
        out += [
            C.in_lang(lang, "use_peft"),
            "",
            "```python",
            "from peft import AutoPeftModelForCausalLM",
            "from transformers import AutoTokenizer",
            "",
            f'model = AutoPeftModelForCausalLM.from_pretrained("{repo_id}")',
            f'tok = AutoTokenizer.from_pretrained("{repo_id}")',
            "```",
            "",
        ]
    if gguf:
        first = gguf[0]
        out += [
            C.in_lang(lang, "use_llamacpp"),
            "",
            "```bash",
            f"llama-cli --hf-repo {repo_id} --hf-file {first} -cnv",
            "```",
            "",
            C.in_lang(lang, "use_ollama"),
            "",
            "```bash",
            f"ollama run hf.co/{repo_id}",
            "```",
            "",
        ]
    elif kind == "model":
        out += [C.in_lang(lang, "use_gguf_first"), ""]
    else:
        out += [C.in_lang(lang, "use_merge_first"), ""]
    out += [C.in_lang(lang, "use_aura"), "", "```bash", f"hf download {repo_id} --local-dir {name}"]
    if kind == "model":
        out.append(f"aura chat --model {name}")
    elif kind == "adapter":
        base = facts.get("base_model") or facts.get("base_model_named") or "BASE"
        if facts.get("base_model"):
            out.append(f"hf download {base} --local-dir {base.rsplit('/', 1)[-1]}")
        out.append(f"aura chat --model {base.rsplit('/', 1)[-1]} --adapter {name}")
    else:
        out.append(f"aura chat --model {name}/{gguf[0]}")
    out += ["```", ""]
    return out


def _body(facts: dict[str, Any], repo_id: str, lang: str, level: str) -> list[str]:
    m, r = facts["model"], facts.get("recipe") or {}
    if facts["kind"] == "adapter":
        peft = {"LORA": "LoRA"}.get(str(m.get("peft_type")), m.get("peft_type") or "LoRA")
        intro = C.in_lang(
            lang, "intro_adapter", peft=peft, base=facts.get("base_model") or facts.get("base_model_named") or "?"
        )
    elif facts["kind"] == "gguf":
        intro = C.in_lang(lang, "intro_gguf")
    elif r.get("command"):
        intro = C.in_lang(lang, "intro_model", arch=m.get("model_type") or "?", command=r["command"])
    else:
        intro = C.in_lang(lang, "intro_model_plain", arch=m.get("model_type") or "?")
    out = [intro, ""]
    if facts.get("recipe"):
        out += [
            f"{level} {C.in_lang(lang, 'recipe')}",
            "",
            *_table([C.in_lang(lang, "h_field"), C.in_lang(lang, "h_value")], _recipe_rows(r, lang)),
        ]
    out += [f"{level} {C.in_lang(lang, 'data')}", "", *_data_lines(facts, lang), ""]
    out += [f"{level} {C.in_lang(lang, 'hardware')}", "", *_hardware_lines(facts, lang), ""]
    out += [f"{level} {C.in_lang(lang, 'evaluation')}", "", *_eval_lines(facts, lang)]
    out += [f"{level} {C.in_lang(lang, 'usage')}", "", *_usage_lines(facts, repo_id, lang)]
    out += [C.in_lang(lang, "pushed"), ""]
    return out


def render(facts: dict[str, Any], *, repo_id: str, license: str):
    """The whole card as a ``huggingface_hub.ModelCard`` (metadata + Spanish body + English section)."""
    from huggingface_hub import ModelCard

    data = card_data(facts, repo_id=repo_id, license=license)
    lines = [
        f"# {repo_id.split('/', 1)[1]}",
        "",
        *_body(facts, repo_id, "es", "##"),
        "## English",
        "",
        *_body(facts, repo_id, "en", "###"),
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines).rstrip() + "\n")
