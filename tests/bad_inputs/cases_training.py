"""`aura pretrain` and `aura finetune`: damaged prepared data, checkpoints, base models, SFT and preference data."""

from __future__ import annotations

import json

from tests.bad_inputs import case
from tests.bad_inputs.hostile import (
    PRETRAIN_TINY,
    RESUME_OUT,
    YAML_DEEP,
    copy,
    damaged_data,
    damaged_model,
    dpo_args,
    edit_json,
    finetune_args,
    nested_json,
    one_line_gzip,
    pair_line,
    pretrain_args,
    random_bytes,
    resume_args,
    safetensors_header_lie,
    sft_file,
    truncate,
    write,
)


@case("pretrain_meta_garbage", "pretrain", "meta.json")
def _(fx, tmp):
    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, text="{ roto"))


@case("pretrain_meta_deep", "pretrain", "meta.json", hostile=True)
def _(fx, tmp):
    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, text=nested_json()))


@case("pretrain_meta_list", "pretrain", "meta.json")
def _(fx, tmp):
    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, text="[]"))


@case("pretrain_meta_missing_splits", "pretrain", "splits")
def _(fx, tmp):
    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, lambda m: {k: v for k, v in m.items() if k != "splits"}))


@case("pretrain_meta_missing_tokenizer", "pretrain", "tokenizer")
def _(fx, tmp):
    data = damaged_data(fx, tmp, lambda m: {k: v for k, v in m.items() if k != "tokenizer"})
    return pretrain_args(fx, tmp, data=data)


@case("pretrain_meta_shards_wrong_type", "pretrain", "shards")
def _(fx, tmp):
    def change(m):
        m["splits"]["train"]["shards"] = "train_00000.bin"
        return m

    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, change))


@case("pretrain_meta_tokens_wrong_type", "pretrain", "tokens")
def _(fx, tmp):
    def change(m):
        m["splits"]["train"]["shards"][0]["tokens"] = "muchos"
        return m

    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, change))


@case("pretrain_meta_dtype_unknown", "pretrain", "dtype")
def _(fx, tmp):
    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, lambda m: {**m, "dtype": "float7"}))


@case("pretrain_meta_vocab_wrong_type", "pretrain", "vocab_size")
def _(fx, tmp):
    def change(m):
        m["tokenizer"]["vocab_size"] = "800"
        return m

    return pretrain_args(fx, tmp, data=damaged_data(fx, tmp, change))


@case("pretrain_shard_truncated", "pretrain", "train_00000.bin")
def _(fx, tmp):
    data = damaged_data(fx, tmp)
    truncate(data / "train_00000.bin", 0.5)
    return pretrain_args(fx, tmp, data=data)


@case("pretrain_resume_weights_truncated", "pretrain", "model.safetensors", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: truncate(ck / "model.safetensors"))


@case("pretrain_resume_weights_header_lie", "pretrain", "model.safetensors", outputs=RESUME_OUT, hostile=True)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: safetensors_header_lie(ck / "model.safetensors"))


@case("pretrain_resume_no_optimizer", "pretrain", "optimizer.pt", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: (ck / "optimizer.pt").unlink())


@case("pretrain_resume_optimizer_truncated", "pretrain", "optimizer.pt", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: truncate(ck / "optimizer.pt"))


@case("pretrain_resume_rng_truncated", "pretrain", "rank-0.pt", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: truncate(ck / "rng" / "rank-0.pt"))


@case("pretrain_resume_no_data_state", "pretrain", "trainer_state.json", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(
        fx, tmp, lambda ck: edit_json(ck / "trainer_state.json", lambda s: {k: v for k, v in s.items() if k != "data"})
    )


@case("pretrain_resume_state_wrong_types", "pretrain", "trainer_state.json", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: edit_json(ck / "trainer_state.json", lambda s: {**s, "step": "dos"}))


@case("pretrain_resume_state_garbage", "pretrain", "trainer_state.json", outputs=RESUME_OUT)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: write(ck / "trainer_state.json", "{ roto"))


@case("pretrain_resume_state_deep", "pretrain", "trainer_state.json", outputs=RESUME_OUT, hostile=True)
def _(fx, tmp):
    return resume_args(fx, tmp, lambda ck: write(ck / "trainer_state.json", nested_json()))


@case("pretrain_init_from_truncated", "pretrain", "model.safetensors")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors"))
    return [
        "pretrain",
        "--data",
        str(fx.data),
        "--init-from",
        str(model),
        "--output-dir",
        str(tmp / "out"),
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--sample-tokens",
        "0",
    ]


@case("pretrain_init_from_config_garbage", "pretrain", "config.json")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: write(m / "config.json", "{ roto"))
    return [
        "pretrain",
        "--data",
        str(fx.data),
        "--init-from",
        str(model),
        "--output-dir",
        str(tmp / "out"),
        "--max-steps",
        "1",
        "--batch-size",
        "2",
        "--sample-tokens",
        "0",
    ]


@case("pretrain_config_yaml_deep", "pretrain", "cfg.yaml", hostile=True)
def _(fx, tmp):
    return pretrain_args(fx, tmp, "--config", write(tmp / "cfg.yaml", "{" * YAML_DEEP + "}" * YAML_DEEP))


@case("pretrain_tokenizer_json_garbage", "pretrain", "tokenizer.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer.json", "{ roto")
    return ["pretrain", "--tokenizer", str(tok), "--output-dir", str(tmp / "out"), *PRETRAIN_TINY, "--max-steps", "1"]


# ---------------------------------------------------------------------------------------------------
# aura finetune (SFT and preference data, base models)


@case("finetune_jsonl_deep", "finetune", "x.jsonl", hostile=True)
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.jsonl", '{"messages": ' + nested_json() + "}\n"))


@case("finetune_json_deep", "finetune", "x.json", hostile=True)
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.json", nested_json()))


@case("finetune_csv_messages_deep", "finetune", "x.csv", hostile=True)
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.csv", 'messages\n"' + nested_json() + '"\n'))


@case("finetune_jsonl_invalid", "finetune", "x.jsonl, line 1")
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.jsonl", '{"instruction": "hola", \n'))


@case("finetune_jsonl_messages_not_list", "finetune", "x.jsonl")
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.jsonl", '{"messages": {"role": "user"}}\n'))


@case("finetune_jsonl_content_not_text", "finetune", "x.jsonl")
def _(fx, tmp):
    body = json.dumps({"messages": [{"role": "user", "content": ["a"]}, {"role": "assistant", "content": "b"}]})
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.jsonl", body + "\n"))


@case("finetune_gzip_one_huge_line", "finetune", "x.jsonl.gz", hostile=True, slow=True)
def _(fx, tmp):
    """A 1 MB gzip holding one 1 GiB line: refused by --max-record-bytes, never held in memory."""
    return finetune_args(fx, tmp, "--data", one_line_gzip(tmp / "x.jsonl.gz", 1 << 30))


@case("finetune_parquet_random", "finetune", "x.parquet", hostile=True)
def _(fx, tmp):
    return finetune_args(fx, tmp, "--data", sft_file(tmp, "x.parquet", random_bytes()))


@case("finetune_base_truncated", "finetune", "model.safetensors")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: truncate(m / "model.safetensors"))
    args = finetune_args(fx, tmp)
    args[args.index("--base-model") + 1] = str(model)
    return args


@case("finetune_base_header_lie", "finetune", "model.safetensors", hostile=True)
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: safetensors_header_lie(m / "model.safetensors"))
    args = finetune_args(fx, tmp)
    args[args.index("--base-model") + 1] = str(model)
    return args


@case("finetune_base_config_list", "finetune", "config.json")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: write(m / "config.json", "[]"))
    args = finetune_args(fx, tmp)
    args[args.index("--base-model") + 1] = str(model)
    return args


@case("finetune_base_tokenizer_garbage", "finetune", "tokenizer.json")
def _(fx, tmp):
    model = damaged_model(fx, tmp, lambda m: write(m / "tokenizer.json", "{ roto"))
    args = finetune_args(fx, tmp)
    args[args.index("--base-model") + 1] = str(model)
    return args


@case("finetune_deepspeed_config_deep", "finetune", "ds.json", hostile=True, slow=True)  # imports DeepSpeed
def _(fx, tmp):
    return finetune_args(fx, tmp, "--deepspeed", write(tmp / "ds.json", nested_json()))


@case("dpo_chosen_rejected_lists", "finetune", "p.jsonl, line 1")
def _(fx, tmp):
    return dpo_args(fx, tmp, write(tmp / "p.jsonl", pair_line(chosen=["Sí.", "Claro."], rejected=["No.", "Nunca."])))


@case("dpo_chosen_list_of_lists", "finetune", "p.jsonl, line 1")
def _(fx, tmp):
    return dpo_args(fx, tmp, write(tmp / "p.jsonl", pair_line(prompt="¿Hola?", chosen=[["Sí."]], rejected=[["No."]])))


@case("dpo_chosen_number", "finetune", "chosen")
def _(fx, tmp):
    return dpo_args(fx, tmp, write(tmp / "p.jsonl", pair_line(prompt="¿Hola?", chosen=1, rejected="No.")))


@case("dpo_jsonl_deep", "finetune", "p.jsonl", hostile=True)
def _(fx, tmp):
    line = '{"prompt": "a", "chosen": ' + nested_json() + ', "rejected": "b"}\n'
    return dpo_args(fx, tmp, write(tmp / "p.jsonl", line))


@case("dpo_missing_fields", "finetune", "rejected")
def _(fx, tmp):
    return dpo_args(fx, tmp, write(tmp / "p.jsonl", pair_line(prompt="a", chosen="b")))


def kto_args(fx, tmp, text: str, *args, name: str = "k.jsonl") -> list[str]:
    return finetune_args(fx, tmp, "--objective", "kto", "--data", write(tmp / name, text), *args)


@case("kto_label_not_boolean", "finetune", "k.jsonl, line 2, field 'label'")
def _(fx, tmp):
    return kto_args(
        fx,
        tmp,
        pair_line(prompt="¿Hola?", completion="Hola.", label=True)
        + pair_line(prompt="¿Adiós?", completion="Adiós.", label="quizá"),
    )


@case("kto_labels_all_one_value", "finetune", "k.jsonl")
def _(fx, tmp):
    return kto_args(
        fx,
        tmp,
        pair_line(prompt="¿Hola?", completion="Hola.", label=True)
        + pair_line(prompt="¿Adiós?", completion="Adiós.", label="sí"),
    )


@case("kto_empty_completion", "finetune", "k.jsonl, line 1, field 'completion'")
def _(fx, tmp):
    return kto_args(
        fx,
        tmp,
        pair_line(prompt="¿Hola?", completion=" ", label=True)
        + pair_line(prompt="¿Adiós?", completion="Adiós.", label=False),
    )


@case("kto_csv_label_column_missing", "finetune", "me_gusta")
def _(fx, tmp):
    return kto_args(
        fx,
        tmp,
        "prompt,completion,label\n¿Hola?,Hola.,1\n¿Adiós?,Adiós.,0\n",
        "--label-column",
        "me_gusta",
        name="k.csv",
    )
