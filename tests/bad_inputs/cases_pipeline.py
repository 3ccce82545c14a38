"""Bad inputs of ``aura pipeline run|list|show|plan``: a pipeline file's mistakes are refused before any
stage runs, naming the file, the stage and the key."""

from __future__ import annotations

from tests.bad_inputs import case

_GOOD = """stages:
  - name: tokenizer
    command: tokenizer train
    options:
      inputs: [aura:corpus_es]
      vocab_size: 300
  - name: prepare
    command: data prepare
    options:
      inputs: [aura:corpus_es]
      tokenizer: tokenizer
"""


@case("pipeline_unknown_key_last_stage", "pipeline run", "vocab_sise")
def _(fx, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "p.yaml").write_text(_GOOD + "      vocab_sise: 3\n", encoding="utf-8")
    return ["pipeline", "run", str(tmp / "p.yaml"), "--output-dir", str(tmp / "out")]


@case("pipeline_not_yaml", "pipeline run", "p.yaml")
def _(fx, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "p.yaml").write_text("stages: [\n  - name: x\n", encoding="utf-8")
    return ["pipeline", "run", str(tmp / "p.yaml"), "--output-dir", str(tmp / "out")]


@case("pipeline_reference_to_later_stage", "pipeline plan", "prepare")
def _(fx, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    text = _GOOD.replace("inputs: [aura:corpus_es]\n      vocab_size", "inputs: [prepare]\n      vocab_size", 1)
    (tmp / "p.yaml").write_text(text, encoding="utf-8")
    return ["pipeline", "plan", str(tmp / "p.yaml")]


@case("pipeline_show_unknown_name", "pipeline show", "no-such-pipeline")
def _(fx, tmp):
    return ["pipeline", "show", "no-such-pipeline"]


@case("pipeline_list_extra_argument", "pipeline list", "extra")
def _(fx, tmp):
    return ["pipeline", "list", "extra"]
