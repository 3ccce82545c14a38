"""``aura push``: the model card and the upload plan, from real tiny runs (no hub is reachable here).

One pipeline (tests/pipelines/push.yaml: a tokenizer, prepared data, a 6-step pretraining, its LoRA adapter and
an evaluation of each) is run once per session; the tests publish with ``--dry-run`` the pretraining run moved
out of the pipeline, the adapter run and the pipeline folder itself, parse the card with huggingface_hub's own
``ModelCard`` and ``model_index_to_eval_results``, and compare every figure with the file it comes from. The
upload plan (which files, in which order, what is left out and why) is tested as data; the upload itself
(``HfApi.create_repo`` + ``create_commit``) is not run: there is no hub to run it against.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_aura, run_aura_here, shared_dir

pytestmark = pytest.mark.slow  # one tiny pipeline (training, evaluations) per session

PIPELINE = ROOT / "tests" / "pipelines" / "push.yaml"


@pytest.fixture(scope="session")
def pipe(tmp_path_factory) -> Path:
    def build(out: Path) -> None:
        proc = run_aura("pipeline", "run", PIPELINE, "--output-dir", out, "--price-per-hour", "2")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    return shared_dir(tmp_path_factory, "push-pipeline", build)


def _card_text(stdout: str) -> str:
    assert "Model card (README.md):\n" in stdout, stdout[-2000:]
    return stdout.split("Model card (README.md):\n", 1)[1].split("\n--dry-run:", 1)[0]


def _card(stdout: str):
    from huggingface_hub import ModelCard

    return ModelCard(_card_text(stdout))


def _results(card) -> list:
    """The card's model-index read by huggingface_hub twice: ModelCard's parse and model_index_to_eval_results on
    the raw YAML, which must agree."""
    import yaml
    from huggingface_hub.repocard_data import model_index_to_eval_results

    raw = yaml.safe_load(str(card).split("---\n", 2)[1])
    name, results = model_index_to_eval_results(raw["model-index"])
    assert name == card.data.model_name and results == card.data.eval_results
    return results


def _value(results, *, task: str, metric: str) -> list[float]:
    return [r.metric_value for r in results if r.task_name == task and r.metric_type == metric]


def _suite_rows(path: Path) -> list[dict]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [row for r in data.get("results", [data]) for row in r["rows"]]


def _plan_lines(stdout: str) -> list[str]:
    lines = []
    for line in stdout.split(" in this order:\n", 1)[1].splitlines():
        if not line.startswith("  "):
            break
        lines.append(line.strip().split("  (", 1)[0])
    return lines


def test_a_finished_run_s_card_holds_its_recipe_data_and_evaluations(pipe, tmp_path):
    run = tmp_path / "runs" / "tiny"  # the pretraining run alone, outside its pipeline
    shutil.copytree(pipe / "pretrain", run)
    ev = run_aura_here("eval", "--model", run / "final", "--suite", "aura-es", "--limit", "2", "--device", "cpu")
    assert ev.returncode == 0, ev.stderr[-2000:]
    proc = run_aura_here("push", run, "team/tiny-es", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    card = _card(proc.stdout)
    d = card.data
    assert d.language == ["es"] and d.license == "apache-2.0" and d.library_name == "transformers"
    assert d.pipeline_tag == "text-generation" and d.base_model is None and {"aura", "llama"} <= set(d.tags)

    # model-index: every row of the eval JSON aura eval wrote beside final/, value for value
    results = _results(card)
    rows = _suite_rows(run / "final.eval-aura-es.limit2.json")
    assert rows and len(results) == len(rows)
    for row in rows:
        assert _value(results, task=row["task"], metric=row["metric"]) == [row["value"]]

    # the recipe: run.json, model_config.json and the training log's own numbers
    info = json.loads((run / "run.json").read_text(encoding="utf-8"))
    mc = json.loads((run / "model_config.json").read_text(encoding="utf-8"))
    with (run / "training_log.csv").open(encoding="utf-8", newline="") as f:
        log = list(csv.DictReader(f))
    text = card.text
    assert f"| steps | {info['last_step']} of {info['total_steps']} |" in text
    assert f"| learning rate | {mc['plan']['schedule']['base']:.3g} |" in text
    assert f"| schedule | {mc['plan']['schedule']['kind']} |" in text
    assert f"| tokens per step | {mc['plan']['tokens_per_step']:,} |" in text
    assert f"| tokens seen | {int(float(log[-1]['tokens'])):,} |" in text
    assert f"| parameters | {mc['parameters']:,} |" in text
    assert f"| preset | {mc['preset']} (llama) |" in text
    # the data: sources by name, the cleaning funnel, the tokenizer's fertility
    meta = json.loads((pipe / "prepare" / "meta.json").read_text(encoding="utf-8"))
    tok = json.loads((pipe / "prepare" / "tokenizer" / "aura_tokenizer.json").read_text(encoding="utf-8"))
    for s in meta["sources"]:
        assert f"`{Path(s['path']).name}`" in text
    kept = meta["cleaning"]["documents_kept"]
    assert f"documents read {meta['cleaning']['documents_read']} → kept {kept}" in text
    assert f"fertility (tokens per word): {tok['fertility']['tokens_per_word']:.3f}" in text
    assert "fertilidad (tokens por palabra): " + f"{tok['fertility']['tokens_per_word']:.3f}".replace(".", ",") in text
    # Spanish first, then English; no folder of this machine in a public card
    assert text.index("## Receta") < text.index("## English") < text.index("### Recipe")
    assert str(tmp_path) not in str(card) and str(pipe) not in str(card) and str(ROOT) not in str(card)
    assert "aura chat --model tiny-es" in text and 'from_pretrained("team/tiny-es")' in text

    # the plan: configuration and tokenizer files, then the weights, the card last; Aura's marker left out
    lines = _plan_lines(proc.stdout)
    assert lines[-2:] == ["model.safetensors", "README.md"] and "config.json" in lines
    assert "  .aura-dir.json  (Aura's internal file)" in proc.stdout


def test_an_adapter_names_its_hub_base_and_peft(pipe):
    refused = run_aura_here("push", pipe / "lora", "team/tiny-lora", "--dry-run")
    assert refused.returncode == 2 and "--base-model OWNER/NAME" in refused.stderr
    assert "Traceback" not in refused.stderr

    proc = run_aura_here("push", pipe / "lora", "team/tiny-lora", "--base-model", "team/tiny-base", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    card = _card(proc.stdout)
    assert card.data.base_model == "team/tiny-base" and card.data.library_name == "peft"
    assert {"peft", "lora", "llama"} <= set(card.data.tags) and card.data.license == "other"
    results = _results(card)
    suite = next((pipe / "eval-lora").glob("eval-aura-es*.json"))
    for row in _suite_rows(suite):
        assert _value(results, task=row["task"], metric=row["metric"]) == [row["value"]]
    ppl = json.loads((pipe / "eval-lora" / "eval.json").read_text(encoding="utf-8"))["results"][0]
    assert _value(results, task="language-modeling", metric="bits_per_byte") == [ppl["bits_per_byte"]]
    mc = json.loads((pipe / "lora" / "model_config.json").read_text(encoding="utf-8"))
    assert f"| LoRA (r, alpha) | {mc['lora']['lora_r']}, {mc['lora']['lora_alpha']} |" in card.text
    assert "AutoPeftModelForCausalLM" in card.text

    # the plan as data: the uploaded adapter_config.json names the hub base, never a folder of this machine
    from aura.publish.push_command import PushConfig, prepare

    p = prepare(PushConfig(model=str(pipe / "lora"), repo_id="team/tiny-lora", base_model="team/tiny-base"))
    by_name = {e.path_in_repo: e for e in p.plan.files}
    cfg = json.loads(by_name["adapter_config.json"].content)
    assert cfg["base_model_name_or_path"] == "team/tiny-base"
    assert (
        json.loads((pipe / "lora" / "final" / "adapter_config.json").read_text())["base_model_name_or_path"]
        != "team/tiny-base"
    )  # the local file is untouched
    for e in p.plan.files:  # no uploaded file names a folder of this machine
        assert str(pipe).encode() not in (e.content if e.content is not None else e.local.read_bytes())
    assert [e.path_in_repo for e in p.plan.files][-1] == "adapter_model.safetensors"
    assert ("README.md", "r_card") in p.plan.excluded  # peft's own README is replaced by the card


def test_a_pipeline_s_card_has_its_device_hours_cost_and_only_its_own_evaluations(pipe):
    report = json.loads((pipe / "report.json").read_text(encoding="utf-8"))
    proc = run_aura_here("push", pipe / "pretrain", "team/tiny-base", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    card = _card(proc.stdout)
    hours = sum(s["device_hours"] or 0 for s in report["stages"])
    cost = sum(s["cost"] or 0 for s in report["stages"])
    own = next(s for s in report["stages"] if s["name"] == "pretrain")
    assert (
        f"Pipeline `push`: {hours:.4f} device-hours in total, cost €{cost:.4f} (price €2.0/hour); this stage "
        f"(`pretrain`): {own['device_hours']:.4f} device-hours."
    ) in card.text
    results = _results(card)
    base_ppl = json.loads((pipe / "eval-base" / "eval.json").read_text(encoding="utf-8"))["results"][0]
    # eval-lora measured the same base folder with the adapter: its perplexity is the adapter's, not the base's
    assert _value(results, task="language-modeling", metric="bits_per_byte") == [base_ppl["bits_per_byte"]]
    for row in _suite_rows(next((pipe / "eval-base").glob("eval-aura-es*.json"))):
        assert _value(results, task=row["task"], metric=row["metric"]) == [row["value"]]

    # the pipeline folder itself publishes its last training stage (here the adapter)
    whole = run_aura_here("push", pipe, "team/tiny-lora", "--base-model", "team/tiny-base", "--dry-run")
    assert whole.returncode == 0, whole.stderr
    assert "adapter_model.safetensors" in _plan_lines(whole.stdout)
    assert "this stage (`lora`)" in _card(whole.stdout).text


def _gguf(path: Path) -> Path:
    """A real GGUF file (gguf's own writer), holding metadata only."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_plan_leaves_out_training_state_locks_and_pickles_and_adds_gguf_files(pipe, tmp_path):
    import torch
    from safetensors.torch import load_file

    from aura.publish.push_command import PushConfig, prepare

    ckpt = tmp_path / "checkpoint-step-6"
    shutil.copytree(pipe / "pretrain" / "checkpoint-step-6", ckpt)
    torch.save(load_file(ckpt / "model.safetensors"), ckpt / "pytorch_model.bin")  # beside the safetensors
    (ckpt / ".tmp-model.safetensors~1@host").write_bytes(b"half")
    (ckpt / ".out.aura-lock").write_text("{}")
    (ckpt / "link.json").symlink_to(ckpt / "config.json")
    exports = tmp_path / "export"
    exports.mkdir()
    g = _gguf(exports / "tiny-q8_0.gguf")
    (exports / "tiny-q8_0.Modelfile").write_text("FROM ./tiny-q8_0.gguf\n", encoding="utf-8")

    p = prepare(PushConfig(model=str(ckpt), repo_id="team/tiny", gguf=[str(g)], license="mit"))
    names = [e.path_in_repo for e in p.plan.files]
    assert names[-3:] == ["model.safetensors", "tiny-q8_0.gguf", "tiny-q8_0.Modelfile"]
    assert set(names[:-3]) == {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    } & {f.name for f in ckpt.iterdir()}
    reasons = dict(p.plan.excluded)
    assert reasons["optimizer.pt"] == "r_training_state" and reasons["trainer_state.json"] == "r_training_state"
    assert reasons["rng"] == "r_training_state" and reasons["pytorch_model.bin"] == "r_pickle"
    assert reasons[".tmp-model.safetensors~1@host"] == "r_unfinished" and reasons[".out.aura-lock"] == "r_lock"
    assert reasons["link.json"] == "r_link"
    assert p.card.data.license == "mit" and "gguf" in p.card.data.tags
    assert "llama-cli --hf-repo team/tiny --hf-file tiny-q8_0.gguf" in p.card.text
    assert "ollama run hf.co/team/tiny" in p.card.text

    # a merged model (aura merge): its record of the base and the adapter is uploaded without local paths
    merged = tmp_path / "merged"
    proc = run_aura_here(
        "merge",
        "--base-model",
        pipe / "pretrain" / "final",
        "--adapter",
        pipe / "lora" / "final",
        "--output-dir",
        merged,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = prepare(PushConfig(model=str(merged), repo_id="team/tiny-merged", base_model="team/tiny-base"))
    record = json.loads(next(e for e in m.plan.files if e.path_in_repo == "aura_merge.json").content)
    assert record["base_model"] == "team/tiny-base" and record["adapter"] == "lora/final"
    assert record["adapter_config"]["base_model_name_or_path"] == "team/tiny-base"
    for e in m.plan.files:
        assert str(pipe).encode() not in (e.content if e.content is not None else e.local.read_bytes())
    assert m.card.data.base_model == "team/tiny-base" and m.card.data.library_name == "transformers"

    # GGUF files alone
    only = run_aura_here("push", g, "team/tiny-gguf", "--dry-run")
    assert only.returncode == 0, only.stderr
    assert _plan_lines(only.stdout) == ["tiny-q8_0.gguf", "tiny-q8_0.Modelfile", "README.md"]
    assert _card(only.stdout).data.library_name == "gguf"


def test_what_must_not_be_uploaded_is_refused_naming_the_fix(pipe, tmp_path):
    import torch
    from safetensors.torch import load_file

    pickled = tmp_path / "pickled"
    shutil.copytree(pipe / "pretrain" / "final", pickled)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    unfinished = tmp_path / "unfinished"
    shutil.copytree(pipe / "pretrain", unfinished, ignore=shutil.ignore_patterns("final"))
    info = json.loads((unfinished / "run.json").read_text(encoding="utf-8"))
    (unfinished / "run.json").write_text(json.dumps(dict(info, status="interrupted")), encoding="utf-8")
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a gguf", encoding="utf-8")

    cases = [
        ((pickled, "team/x"), f"{pickled} has pickle weights only (pytorch_model.bin)"),
        (
            (unfinished, "team/x"),
            f"{unfinished} has no final/: the run did not finish (status: interrupted). "
            f"Pass a model folder: {unfinished / 'best'}, {unfinished / 'checkpoint-step-6'}",
        ),
        ((pipe / "pretrain", "tiny-es"), "REPO_ID 'tiny-es' is not valid: expected OWNER/NAME"),
        ((pipe / "pretrain", "team/a/b"), "REPO_ID 'team/a/b' is not valid"),
        ((pipe / "pretrain", "team/x", "--gguf", not_gguf), f"--gguf {not_gguf}: not a GGUF file"),
        ((tmp_path, "team/x"), f"{tmp_path} is not an Aura run (run.json)"),
    ]
    for args, expected in cases:
        proc = run_aura_here("push", *args, "--dry-run")
        assert proc.returncode == 2 and expected in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "Model card" not in proc.stdout
    es = run_aura_here("push", pipe / "pretrain", "tiny-es", "--dry-run", env={"AURA_LANG": "es"})
    assert es.returncode == 2 and "se esperaba PROPIETARIO/NOMBRE" in es.stderr


def test_the_upload_needs_a_token_and_a_hub_that_answers(pipe, tmp_path):
    """The real upload path (huggingface_hub's HfApi, no mock) up to the network: without a token it stops
    before any request; with one and a hub address where nothing listens, the refused connection is a clear
    error (exit 2), not a traceback. An upload to a real hub is not run here."""
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_TOKEN": ""}
    proc = run_aura("push", pipe / "pretrain", "team/tiny-es", env=env)
    assert proc.returncode == 2 and "No Hugging Face hub token: set HF_TOKEN" in proc.stderr, proc.stderr
    env.update(HF_TOKEN="hf_not_a_real_token", HF_ENDPOINT="http://127.0.0.1:9")  # port 9: discard, closed here
    proc = run_aura("push", pipe / "pretrain", "team/tiny-es", env=env)
    assert proc.returncode == 2 and "Could not upload to team/tiny-es:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "Uploading 7 files" in proc.stdout  # 6 of final/ and the card
