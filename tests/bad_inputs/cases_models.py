"""`aura generate`, `chat`, `eval`, `merge` and `export gguf`: damaged models, adapters, tokenizers, task files."""

from __future__ import annotations

from pathlib import Path

from tests.bad_inputs import case
from tests.bad_inputs.hostile import (
    YAML_DEEP,
    copy,
    damaged_adapter,
    damaged_data,
    damaged_model,
    edit_json,
    nested_json,
    random_bytes,
    safetensors_header_lie,
    truncate,
    write,
)


def _gen(model: Path, *args) -> list[str]:
    return ["generate", "--model", str(model), "--prompt", "Hola", "--max-new-tokens", "2", *map(str, args)]


@case("generate_weights_truncated", "generate", "model.safetensors")
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors")))


@case("generate_weights_header_lie", "generate", "model.safetensors", hostile=True)
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: safetensors_header_lie(m / "model.safetensors")))


@case("generate_checkpoint_truncated", "generate", "model.safetensors")
def _(fx, tmp):
    run = copy(fx.run, tmp / "run")
    truncate(run / "checkpoint-step-2" / "model.safetensors")
    return _gen(run / "checkpoint-step-2")


@case("generate_config_garbage", "generate", "config.json")
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: write(m / "config.json", "{ roto")))


@case("generate_config_deep", "generate", "config.json", hostile=True)
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: write(m / "config.json", nested_json())))


@case("generate_tokenizer_garbage", "generate", "tokenizer.json")
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: write(m / "tokenizer.json", "{ roto")))


@case("generate_tokenizer_config_list", "generate", "tokenizer_config.json")
def _(fx, tmp):
    return _gen(damaged_model(fx, tmp, lambda m: write(m / "tokenizer_config.json", "[]")))


@case("generate_adapter_config_list", "generate", "adapter_config.json")
def _(fx, tmp):
    return _gen(fx.llama, "--adapter", damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", "[1, 2]")))


@case("generate_adapter_config_deep", "generate", "adapter_config.json", hostile=True)
def _(fx, tmp):
    adapter = damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", nested_json()))
    return _gen(fx.llama, "--adapter", adapter)


@case("generate_adapter_truncated", "generate", "adapter_model.safetensors")
def _(fx, tmp):
    return _gen(fx.llama, "--adapter", damaged_adapter(fx, tmp, lambda a: truncate(a / "adapter_model.safetensors")))


@case("generate_adapter_alone_config_string", "generate", "adapter_config.json")
def _(fx, tmp):
    return _gen(damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", '"llama"')))


@case("generate_prompts_jsonl_deep", "generate", "p.jsonl", hostile=True)
def _(fx, tmp):
    return [
        "generate",
        "--model",
        str(fx.llama),
        "--prompts-file",
        str(write(tmp / "p.jsonl", '{"prompt": "hola"}\n{"prompt": ' + nested_json() + "}\n")),
        "--output-dir",
        str(tmp / "out"),
        "--max-new-tokens",
        "2",
    ]


@case("generate_prompts_jsonl_invalid", "generate", "p.jsonl")
def _(fx, tmp):
    return [
        "generate",
        "--model",
        str(fx.llama),
        "--prompts-file",
        str(write(tmp / "p.jsonl", '{"prompt": "hola"\n')),
        "--output-dir",
        str(tmp / "out"),
        "--max-new-tokens",
        "2",
    ]


@case("generate_prompts_jsonl_no_prompt", "generate", "prompt")
def _(fx, tmp):
    return [
        "generate",
        "--model",
        str(fx.llama),
        "--prompts-file",
        str(write(tmp / "p.jsonl", '{"texto": "hola"}\n')),
        "--output-dir",
        str(tmp / "out"),
        "--max-new-tokens",
        "2",
    ]


@case("generate_gguf_random", "generate", "m.gguf", hostile=True)
def _(fx, tmp):
    return _gen(write(tmp / "m.gguf", b"GGUF" + random_bytes()))


@case("chat_weights_truncated", "chat", "model.safetensors")
def _(fx, tmp):
    return ["chat", "--model", str(damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors")))]


@case("chat_adapter_config_list", "chat", "adapter_config.json")
def _(fx, tmp):
    return [
        "chat",
        "--model",
        str(fx.llama),
        "--adapter",
        str(damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", "[]"))),
    ]


@case("chat_adapter_truncated", "chat", "adapter_model.safetensors")
def _(fx, tmp):
    return [
        "chat",
        "--model",
        str(fx.llama),
        "--adapter",
        str(damaged_adapter(fx, tmp, lambda a: truncate(a / "adapter_model.safetensors"))),
    ]


@case("chat_tokenizer_garbage", "chat", "tokenizer.json")
def _(fx, tmp):
    return ["chat", "--model", str(damaged_model(fx, tmp, lambda m: write(m / "tokenizer.json", "{ roto")))]


# ---------------------------------------------------------------------------------------------------
# aura eval


@case("eval_weights_truncated", "eval", "model.safetensors")
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors"))),
        "--data",
        str(fx.data),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("eval_adapter_config_list", "eval", "adapter_config.json")
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--adapter",
        str(damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", "[]"))),
        "--data",
        str(fx.data),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("eval_adapter_truncated", "eval", "adapter_model.safetensors")
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--adapter",
        str(damaged_adapter(fx, tmp, lambda a: truncate(a / "adapter_model.safetensors"))),
        "--data",
        str(fx.data),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("eval_data_meta_garbage", "eval", "meta.json")
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--data",
        str(damaged_data(fx, tmp, text="{ roto")),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("eval_data_meta_missing_splits", "eval", "splits")
def _(fx, tmp):
    data = damaged_data(fx, tmp, lambda m: {k: v for k, v in m.items() if k != "splits"})
    return ["eval", "--model", str(fx.llama), "--data", str(data), "--output-dir", str(tmp / "out")]


@case("eval_include_yaml_syntax", "eval", "broken.yaml")
def _(fx, tmp):
    tasks = tmp / "tasks"
    write(tasks / "broken.yaml", "task: mi_tarea\ndataset_path: json\n  metric_list: [\n")
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--tasks",
        "mi_tarea",
        "--include-path",
        str(tasks),
        "--output-dir",
        str(tmp / "out"),
        "--limit",
        "1",
    ]


@case("eval_include_yaml_deep", "eval", "deep.yaml", hostile=True)
def _(fx, tmp):
    tasks = tmp / "tasks"
    write(tasks / "deep.yaml", "task: mi_tarea\nx: " + nested_json(YAML_DEEP) + "\n")
    return [
        "eval",
        "--model",
        str(fx.llama),
        "--tasks",
        "mi_tarea",
        "--include-path",
        str(tasks),
        "--output-dir",
        str(tmp / "out"),
        "--limit",
        "1",
    ]


@case("eval_gguf_random", "eval", "m.gguf", hostile=True)
def _(fx, tmp):
    return [
        "eval",
        "--model",
        str(write(tmp / "m.gguf", b"GGUF" + random_bytes())),
        "--data",
        str(fx.data),
        "--output-dir",
        str(tmp / "out"),
    ]


# ---------------------------------------------------------------------------------------------------
# aura merge / export gguf


def _merge(base: Path, adapter: Path, tmp: Path) -> list[str]:
    return ["merge", "--base-model", str(base), "--adapter", str(adapter), "--output-dir", str(tmp / "out")]


@case("merge_adapter_truncated", "merge", "adapter_model.safetensors")
def _(fx, tmp):
    return _merge(fx.llama, damaged_adapter(fx, tmp, lambda a: truncate(a / "adapter_model.safetensors")), tmp)


@case("merge_adapter_header_lie", "merge", "adapter_model.safetensors", hostile=True)
def _(fx, tmp):
    adapter = damaged_adapter(fx, tmp, lambda a: safetensors_header_lie(a / "adapter_model.safetensors"))
    return _merge(fx.llama, adapter, tmp)


@case("merge_adapter_config_list", "merge", "adapter_config.json")
def _(fx, tmp):
    return _merge(fx.llama, damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", "[]")), tmp)


@case("merge_adapter_config_garbage", "merge", "adapter_config.json")
def _(fx, tmp):
    return _merge(fx.llama, damaged_adapter(fx, tmp, lambda a: write(a / "adapter_config.json", "{ roto")), tmp)


@case("merge_adapter_config_wrong_types", "merge", "adapter_config.json")
def _(fx, tmp):
    return _merge(
        fx.llama,
        damaged_adapter(
            fx, tmp, lambda a: edit_json(a / "adapter_config.json", lambda c: {**c, "r": "ocho", "target_modules": 5})
        ),
        tmp,
    )


@case("merge_base_truncated", "merge", "model.safetensors")
def _(fx, tmp):
    return _merge(damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors")), fx.adapter, tmp)


@case("merge_base_config_deep", "merge", "config.json", hostile=True)
def _(fx, tmp):
    return _merge(damaged_model(fx, tmp, lambda m: write(m / "config.json", nested_json())), fx.adapter, tmp)


def _gguf(model: Path, tmp: Path) -> list[str]:
    return ["export", "gguf", "--model", str(model), "--output-dir", str(tmp / "out"), "--quant", "f32", "--no-verify"]


@case("export_weights_truncated", "export gguf", "model.safetensors")
def _(fx, tmp):
    return _gguf(damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors")), tmp)


@case("export_weights_header_lie", "export gguf", "model.safetensors", hostile=True)
def _(fx, tmp):
    return _gguf(damaged_model(fx, tmp, lambda m: safetensors_header_lie(m / "model.safetensors")), tmp)


@case("export_tokenizer_garbage", "export gguf", "tokenizer.json")
def _(fx, tmp):
    return _gguf(damaged_model(fx, tmp, lambda m: write(m / "tokenizer.json", "{ roto")), tmp)


@case("export_tokenizer_deep", "export gguf", "tokenizer.json", hostile=True)
def _(fx, tmp):
    return _gguf(damaged_model(fx, tmp, lambda m: write(m / "tokenizer.json", nested_json())), tmp)


@case("export_config_wrong_types", "export gguf", "config.json")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: edit_json(m / "config.json", lambda c: {**c, "num_hidden_layers": "dos"}))
    return _gguf(model, tmp)


@case("export_checkpoint_truncated", "export gguf", "model.safetensors")
def _(fx, tmp):
    run = copy(fx.run, tmp / "run")
    truncate(run / "checkpoint-step-2" / "model.safetensors")
    return _gguf(run / "checkpoint-step-2", tmp)
