"""`aura data prepare`, `aura tokenizer train` and `aura tokenizer extend`: damaged texts, tokenizers, configs."""

from __future__ import annotations

import gzip
import json

from tests.bad_inputs import case
from tests.bad_inputs.hostile import (
    YAML_DEEP,
    copy,
    docs,
    edit_json,
    nested_json,
    one_line_gzip,
    pair_line,
    prepare_args,
    random_bytes,
    write,
)


def _with_config(fx, tmp, body: str | bytes) -> list[str]:
    return prepare_args(fx, tmp, write(tmp / "x.txt", docs()), extra=["--config", write(tmp / "cfg.yaml", body)])


@case("prepare_jsonl_deep", "data prepare", "x.jsonl", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.jsonl", pair_line(text="hola") + '{"text": ' + nested_json() + "}\n"))


@case("prepare_json_deep", "data prepare", "x.json", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.json", nested_json()))


@case("prepare_jsonl_invalid", "data prepare", "x.jsonl, line 2")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.jsonl", '{"text": "hola"}\n{"text": "adiós"\n'))


@case("prepare_jsonl_missing_field", "data prepare", "texto")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.jsonl", '{"texto": "hola"}\n'))


@case("prepare_jsonl_not_text", "data prepare", "x.jsonl")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.jsonl", '{"text": {"a": 1}}\n'))


@case("prepare_json_scalar", "data prepare", "x.json")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.json", "42"))


@case("prepare_csv_column", "data prepare", "cuerpo")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.csv", "id,cuerpo\n1,hola\n"))


@case("prepare_non_utf8", "data prepare", "x.txt")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.txt", b"buenos d\xedas\n" * 3))


@case("prepare_missing_input", "data prepare", "nope.txt")
def _(fx, tmp):
    return prepare_args(fx, tmp, tmp / "nope.txt")


@case("prepare_empty_file", "data prepare", "x.txt")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.txt", ""))


@case("prepare_parquet_random", "data prepare", "x.parquet", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.parquet", random_bytes()))


@case("prepare_parquet_magic_random", "data prepare", "x.parquet", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.parquet", b"PAR1" + random_bytes() + b"PAR1"))


@case("prepare_gzip_random", "data prepare", "x.txt.gz", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.txt.gz", random_bytes()))


@case("prepare_gzip_truncated", "data prepare", "x.jsonl.gz")
def _(fx, tmp):
    data = gzip.compress(docs(400).encode())
    return prepare_args(fx, tmp, write(tmp / "x.jsonl.gz", data[: len(data) // 2]))


@case("prepare_zst_random", "data prepare", "x.txt.zst", hostile=True)
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.txt.zst", random_bytes()))


@case("prepare_gzip_one_huge_line", "data prepare", "x.txt.gz", hostile=True)
def _(fx, tmp):
    """A 1 MB gzip holding one 1 GiB line: refused by the per-record limit, memory never holds the line."""
    return prepare_args(fx, tmp, one_line_gzip(tmp / "x.txt.gz", 1 << 30))


@case("prepare_tokenizer_json_garbage", "data prepare", "tokenizer.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer.json", "{ esto no es json")
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_json_wrong_shape", "data prepare", "tokenizer.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer.json", json.dumps({"model": {"type": "BPE", "vocab": [1, 2]}}))
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_config_garbage", "data prepare", "tokenizer_config.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer_config.json", "[1, 2")
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_config_list", "data prepare", "tokenizer_config.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer_config.json", "[1, 2]")
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_config_deep", "data prepare", "tokenizer_config.json", hostile=True)
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer_config.json", nested_json())
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tok),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_tokenizer_missing", "data prepare", "nope")
def _(fx, tmp):
    return [
        "data",
        "prepare",
        str(write(tmp / "x.txt", docs())),
        "--tokenizer",
        str(tmp / "nope"),
        "--output-dir",
        str(tmp / "out"),
    ]


@case("prepare_config_yaml_syntax", "data prepare", "cfg.yaml")
def _(fx, tmp):
    return _with_config(fx, tmp, "seed: [1,\n")


@case("prepare_config_yaml_deep", "data prepare", "cfg.yaml", hostile=True)
def _(fx, tmp):
    return _with_config(fx, tmp, "seed: " + nested_json(YAML_DEEP) + "\n")


@case("prepare_config_yaml_list", "data prepare", "cfg.yaml")
def _(fx, tmp):
    return _with_config(fx, tmp, "- 1\n- 2\n")


@case("prepare_config_yaml_wrong_type", "data prepare", "seed")
def _(fx, tmp):
    return _with_config(fx, tmp, "seed: [1, 2]\n")


@case("prepare_config_yaml_non_utf8", "data prepare", "cfg.yaml")
def _(fx, tmp):
    return _with_config(fx, tmp, b"seed: \xff\n")


@case("prepare_val_fraction", "data prepare", "--val-fraction")
def _(fx, tmp):
    return prepare_args(fx, tmp, write(tmp / "x.txt", docs()), extra=["--val-fraction", "2"])


# ---------------------------------------------------------------------------------------------------
# aura tokenizer train / extend


@case("tokenizer_train_jsonl_deep", "tokenizer train", "x.jsonl", hostile=True)
def _(fx, tmp):
    return [
        "tokenizer",
        "train",
        str(write(tmp / "x.jsonl", '{"text": ' + nested_json() + "}\n")),
        "--vocab-size",
        "400",
        "--output-dir",
        str(tmp / "out"),
    ]


@case("tokenizer_train_gzip_one_huge_line", "tokenizer train", "x.txt.gz", hostile=True)
def _(fx, tmp):
    return [
        "tokenizer",
        "train",
        str(one_line_gzip(tmp / "x.txt.gz", 1 << 30)),
        "--vocab-size",
        "400",
        "--output-dir",
        str(tmp / "out"),
    ]


@case("tokenizer_train_parquet_random", "tokenizer train", "x.parquet", hostile=True)
def _(fx, tmp):
    return [
        "tokenizer",
        "train",
        str(write(tmp / "x.parquet", random_bytes())),
        "--vocab-size",
        "400",
        "--output-dir",
        str(tmp / "out"),
    ]


@case("tokenizer_train_prepared_meta_garbage", "tokenizer train", "meta.json")
def _(fx, tmp):
    data = copy(fx.data, tmp / "data")
    write(data / "meta.json", "{ roto")
    return ["tokenizer", "train", str(data), "--vocab-size", "400", "--output-dir", str(tmp / "out")]


@case("tokenizer_train_prepared_meta_wrong_types", "tokenizer train", "meta.json")
def _(fx, tmp):
    data = copy(fx.data, tmp / "data")
    edit_json(data / "meta.json", lambda m: {**m, "sources": "corpus.txt"})
    return ["tokenizer", "train", str(data), "--vocab-size", "400", "--output-dir", str(tmp / "out")]


@case("tokenizer_train_vocab_small", "tokenizer train", "--vocab-size")
def _(fx, tmp):
    return [
        "tokenizer",
        "train",
        str(write(tmp / "x.txt", docs())),
        "--vocab-size",
        "10",
        "--output-dir",
        str(tmp / "out"),
    ]


@case("tokenizer_extend_base_garbage", "tokenizer extend", "tokenizer.json")
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer.json", random_bytes().hex())
    return ["tokenizer", "extend", str(tok), str(write(tmp / "x.txt", docs())), "--output-dir", str(tmp / "out")]


@case("tokenizer_extend_base_config_deep", "tokenizer extend", "tokenizer_config.json", hostile=True)
def _(fx, tmp):
    tok = copy(fx.tokenizer, tmp / "tok")
    write(tok / "tokenizer_config.json", nested_json())
    return ["tokenizer", "extend", str(tok), str(write(tmp / "x.txt", docs())), "--output-dir", str(tmp / "out")]


@case("tokenizer_extend_jsonl_deep", "tokenizer extend", "x.jsonl", hostile=True)
def _(fx, tmp):
    return [
        "tokenizer",
        "extend",
        str(fx.tokenizer),
        str(write(tmp / "x.jsonl", '{"text": ' + nested_json() + "}\n")),
        "--output-dir",
        str(tmp / "out"),
    ]


# ---------------------------------------------------------------------------------------------------
# aura data curate


def _curate(tmp, *inputs) -> list[str]:
    return ["data", "curate", *map(str, inputs), "--output-dir", str(tmp / "out"), "--workers", "1"]


@case("curate_jsonl_deep", "data curate", "x.jsonl", hostile=True)
def _(fx, tmp):
    return _curate(tmp, write(tmp / "x.jsonl", pair_line(text="hola") + '{"text": ' + nested_json() + "}\n"))


@case("curate_jsonl_invalid", "data curate", "x.jsonl")
def _(fx, tmp):
    return _curate(tmp, write(tmp / "x.jsonl", '{"text": "hola"}\n{"text": "adiós"\n'))


@case("curate_warc_random", "data curate", "x.warc.gz", hostile=True)
def _(fx, tmp):
    return _curate(tmp, write(tmp / "x.warc.gz", random_bytes()))


@case("curate_missing_input", "data curate", "nope.jsonl")
def _(fx, tmp):
    return _curate(tmp, tmp / "nope.jsonl")
