"""GRPO with tools (``aura finetune --objective grpo --tools FILE``): the sandbox stops a tool that loops,
allocates without bound, writes outside its folder or opens a socket (and nothing outside is touched), a good
tool returns its value; tools are read from a .py or a .yaml file and offered through the chat template; a
completion that calls a tool gets the tool turn appended with ``tool_mask`` 0 and the loss ignores those
tokens (and the ids and mask are those of TRL's ``_tool_call_loop``); a CLI run on a tiny model makes real
calculator calls and resumes exactly after SIGTERM and kill -9; the validation reward follows the calls
through the same loop; 2 DDP ranks equal one process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import run_aura_killed, run_aura_terminated
from tests.test_finetune import finetune
from tests.test_grpo import FAST, step_rows
from tests.tiny_models import (
    TOOL_CALL as CALL,
    TOOL_TEMPLATE,
    build_tool_caller,
    train_tokenizer,
)

ROOT = Path(__file__).resolve().parents[1]
CALCULATOR = ROOT / "aura" / "resources" / "tools" / "calculadora.py"
MATH = ROOT / "aura" / "resources" / "math_es"


BAD_TOOLS = """
import os, socket

def loop(n: int) -> int:
    '''Cuenta sin fin.

    Args:
        n: inicio
    '''
    while True:
        n += 1

def hog(n: int) -> int:
    '''Reserva memoria sin fin.

    Args:
        n: bloques
    '''
    blocks = []
    while True:
        blocks.append(bytearray(10**7))

def write(path: str) -> str:
    '''Escribe en un archivo.

    Args:
        path: ruta
    '''
    with open(path, "w") as f:
        f.write("tocado")
    return "escrito"

def remove(path: str) -> str:
    '''Borra un archivo.

    Args:
        path: ruta
    '''
    os.remove(path)
    return "borrado"

CALLS = []

def count(n: int) -> int:
    '''Cuenta las llamadas que vio este módulo.

    Args:
        n: ignorado
    '''
    CALLS.append(n)
    return len(CALLS)

def parent(n: int) -> int:
    '''El proceso que arrancó la llamada.

    Args:
        n: ignorado
    '''
    return os.getppid()

def crash(n: int) -> str:
    '''Lee la dirección 0 (una violación de segmento).

    Args:
        n: ignorado
    '''
    import ctypes
    return ctypes.string_at(0)

def connect(port: int) -> str:
    '''Abre un socket.

    Args:
        port: puerto
    '''
    s = socket.socket()
    s.connect(("127.0.0.1", port))
    return "conectado"
"""


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tools") / "malas.py"
    path.write_text(BAD_TOOLS, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------------
# The sandbox


def test_a_good_tool_returns_its_value_and_the_calculator_runs_no_code():
    from aura.inference.sandbox import call

    assert call(str(CALCULATOR), "calcular", {"expresion": "(12 + 3) * 2,5"}).text == "37,5"
    r = call(str(CALCULATOR), "calcular", {"expresion": "__import__('os').system('true')"})
    assert not r.ok and r.text.startswith("Error: ValueError")
    r = call(str(CALCULATOR), "calcular", {"expresion": "1/0"})
    assert not r.ok and "división por cero" in r.text


def test_a_looping_tool_is_stopped_at_its_time_limit(bad):
    from aura.inference.sandbox import Limits, call

    started = time.perf_counter()
    r = call(str(bad), "loop", {"n": 1}, limits=Limits(timeout=1.0))
    assert not r.ok and r.text == "Error: the tool ran past 1 s and was stopped"
    assert time.perf_counter() - started < 10


def test_a_tool_that_allocates_without_bound_is_stopped(bad):
    from aura.inference.sandbox import Limits, call

    r = call(str(bad), "hog", {"n": 1}, limits=Limits(timeout=20.0, memory_mb=256))
    assert not r.ok and r.text.startswith("Error: MemoryError"), r.text


def test_a_tool_writes_only_inside_its_own_folder(bad, tmp_path):
    from aura.inference.sandbox import call

    victim = tmp_path / "mio.txt"
    victim.write_text("original", encoding="utf-8")
    for target in ("../fuera.txt", str(tmp_path / "nuevo.txt"), str(victim)):
        r = call(str(bad), "write", {"path": target})
        assert not r.ok and "writing outside the tool's folder is not allowed" in r.text, r.text
    r = call(str(bad), "remove", {"path": str(victim)})
    assert not r.ok and "outside the tool's folder" in r.text
    assert victim.read_text(encoding="utf-8") == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mio.txt"]
    assert call(str(bad), "write", {"path": "dentro.txt"}).text == "escrito"  # its own folder is writable


def test_a_tool_cannot_open_a_socket(bad):
    from aura.inference.sandbox import call

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    try:
        r = call(str(bad), "connect", {"port": server.getsockname()[1]})
        assert not r.ok and "network access is not allowed" in r.text, r.text
        with pytest.raises(socket.timeout):
            server.accept()  # nobody came
    finally:
        server.close()


def test_a_toolbox_forks_every_call_from_the_servers_it_keeps_and_they_outlive_a_crash_and_a_timeout(bad):
    """A run's calls fork from at most ``workers`` kept servers (a started interpreter each, not one per call),
    every call imports the tool's file afresh (a module's state never carries over), and a call that crashes
    or runs past its limit is reported while its server goes on serving."""
    from aura.inference.sandbox import Limits
    from aura.inference.tools import ToolBox, ToolCall, load_tools

    box = ToolBox(load_tools(bad), limits=Limits(timeout=1.0), workers=2)
    try:
        servers = set()
        for _ in range(2):
            results = box.run([ToolCall("parent", {"n": 0})] * 4 + [ToolCall("count", {"n": 0})] * 3)
            assert all(r.ok for r in results), results
            assert [r.text for r in results[4:]] == ["1", "1", "1"]
            servers |= {r.text for r in results[:4]}
        crash, loop = box.run([ToolCall("crash", {"n": 0}), ToolCall("loop", {"n": 0})])
        assert not crash.ok and crash.text == "Error: the tool's process ended by signal SIGSEGV", crash.text
        assert not loop.ok and loop.text == "Error: the tool ran past 1 s and was stopped", loop.text
        servers |= {r.text for r in box.run([ToolCall("parent", {"n": 0})] * 4)}
        assert 1 <= len(servers) <= 2 and str(os.getpid()) not in servers, servers  # not started by Aura per call
    finally:
        box.close()


# ---------------------------------------------------------------------------------------------------
# Declaring, offering and parsing tools


def test_tools_come_from_a_python_file_or_a_yaml_list_and_mistakes_name_the_file(tmp_path, bad):
    from aura.core.errors import AuraError
    from aura.inference.tools import load_tools

    (tool,) = load_tools(CALCULATOR)
    assert tool.name == "calcular" and tool.schema["function"]["parameters"]["required"] == ["expresion"]
    assert tool.schema["function"]["description"].startswith("Calcula el resultado")
    assert [t.name for t in load_tools(bad)] == [
        "loop",
        "hog",
        "write",
        "remove",
        "count",
        "parent",
        "crash",
        "connect",
    ]
    listed = tmp_path / "tools.yaml"
    shutil.copy(CALCULATOR, tmp_path / "calc.py")
    listed.write_text("tools:\n  - calc.py:calcular\n", encoding="utf-8")
    assert [t.name for t in load_tools(listed)] == ["calcular"]
    undocumented = tmp_path / "sin_doc.py"
    undocumented.write_text("def f(x):\n    return x\n", encoding="utf-8")
    with pytest.raises(AuraError, match="sin_doc.py: the function 'f' cannot be described as a tool"):
        load_tools(undocumented)
    listed.write_text("tools:\n  - nada.py:calcular\n", encoding="utf-8")
    with pytest.raises(AuraError, match="is not FILE.py:FUNCTION with a file that exists"):
        load_tools(listed)


def test_templates_without_tools_are_refused_and_calls_are_parsed(tmp_path):
    from transformers import AutoTokenizer

    from aura.core.errors import AuraError
    from aura.inference.sandbox import Result
    from aura.inference.tools import check_template, parse_tool_calls, tool_turn_ids

    tok = AutoTokenizer.from_pretrained(train_tokenizer(tmp_path / "tok", vocab_size=300))
    with pytest.raises(AuraError, match="does not support tools"):
        check_template(tok, model="tiny")  # plain ChatML drops tool calls
    tok.chat_template = TOOL_TEMPLATE
    check_template(tok, model="tiny")
    calls = parse_tool_calls("Primero sumo. " + CALL + ' <tool_call>{"nombre": 1}</tool_call>')
    assert [(c.name, c.arguments) for c in calls] == [("calcular", {"expresion": "12 + 3"}), ("?", None)]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    closing, suffix = tool_turn_ids(tok, calls[:1], [Result(True, "15")], end_of_turn=[im_end])
    assert closing == [im_end]
    assert (
        tok.decode(suffix)
        == "\n<|im_start|>user\n<tool_response>\n15\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


# ---------------------------------------------------------------------------------------------------
# Multi-turn rollouts


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    """A tiny Llama that has learnt, in a few steps, to answer with a calculator call and then, after the
    tool's output, with "Respuesta: 15"; and four Spanish math problems whose answer is set to 15."""
    from aura.inference.tools import load_tools

    root = tmp_path_factory.mktemp("grpo_tools")
    rows = [json.loads(ln) for ln in (MATH / "train.jsonl").read_text(encoding="utf-8").splitlines()[:4]]
    data = root / "prompts.jsonl"
    data.write_text(
        "".join(json.dumps({"prompt": r["prompt"][:60], "answer": "15"}, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    model = build_tool_caller(root, [r["prompt"][:60] for r in rows], steps=30)
    return {"root": root, "model": model, "data": data, "schemas": [t.schema for t in load_tools(CALCULATOR)]}


def _source(env, generate, *, turns: int = 2, max_new: int = 160, template: str | None = None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aura.data.prompts import encode_prompts, load_prompts
    from aura.data.rewards import RewardSet, parse_reward
    from aura.distributed import DistInfo
    from aura.inference.loading import end_of_turn_ids
    from aura.inference.sampling import SamplingParams
    from aura.inference.tools import ToolBox, load_tools
    from aura.train.objectives.tool_rollout import ToolRolloutSource

    tok = AutoTokenizer.from_pretrained(env["model"])
    tok.chat_template = template or tok.chat_template
    prompts = encode_prompts(load_prompts(env["data"])[:1], tok, templated=True, tools=env["schemas"])
    stops = tuple(end_of_turn_ids(tok))
    return ToolRolloutSource(
        prompts,
        policy=AutoModelForCausalLM.from_pretrained(env["model"]),
        rewards=RewardSet([parse_reward("exact-answer")]),
        tokenizer=tok,
        sampling=SamplingParams(max_new_tokens=max_new, stop_ids=stops, stop_strings=("</tool_call>",)),
        num_generations=2,
        batch_size=2,
        accumulation=1,
        scale_rewards="group",
        temperature=1.0,
        beta=0.0,
        dist=DistInfo(),
        precision="fp32",
        generate=generate,
        tools=ToolBox(load_tools(CALCULATOR)),
        max_tool_turns=turns,
        end_of_turn=list(stops),
    )


def test_a_tool_call_gets_its_tool_turn_appended_masked_and_the_loss_ignores_it(env):
    """Row 0 calls the calculator (stopping at ``</tool_call>``), reads 15 and answers; row 1 answers at once.
    The tool turn (the closing ``<|im_end|>``, the tool's output, the next assistant opening) is appended with
    ``tool_mask`` 0: it leaves ``completion_mask``, the reward reads the final turn, and the loss does not move
    when those tokens' old log-probs change (it does when a model token's does)."""
    import torch

    from aura.train.objectives.grpo import GRPO
    from aura.train.objectives.tool_rollout import turn_key

    seen = []

    def engine(prompts, keys):
        seen.append(keys)
        out = []
        for p in prompts:
            text = tok.decode(p)
            if "<tool_response>" in text:
                out.append(tok("Son 15.\nRespuesta: 15<|im_end|>", add_special_tokens=False)["input_ids"])
            elif len(out) == 0:
                out.append(tok(CALL, add_special_tokens=False)["input_ids"])
            else:
                out.append(tok("Respuesta: 7<|im_end|>", add_special_tokens=False)["input_ids"])
        return out

    source = _source(env, engine)
    tok = source.tok
    (batch,) = source.window(0, 0)
    assert seen[1] == [turn_key(seen[0][0], 1)]  # only row 0 goes on, with its own key for turn 1
    call_ids = tok(CALL, add_special_tokens=False)["input_ids"]
    tool_text = "<|im_end|>\n<|im_start|>user\n<tool_response>\n15\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    tool_ids = tok(tool_text, add_special_tokens=False)["input_ids"]
    answer_ids = tok("Son 15.\nRespuesta: 15<|im_end|>", add_special_tokens=False)["input_ids"]
    c = len(call_ids) + len(tool_ids) + len(answer_ids)
    p = batch["input_ids"].shape[1] - batch["completion_mask"].shape[1]
    assert batch["input_ids"][0, p : p + c].tolist() == call_ids + tool_ids + answer_ids
    expected = [1] * len(call_ids) + [0] * len(tool_ids) + [1] * len(answer_ids)
    assert batch["completion_mask"][0, :c].tolist() == expected
    assert batch["advantages"][0] > 0 > batch["advantages"][1]  # the final turn "Respuesta: 15" is right
    stats = dict(zip(GRPO(tools=True, reward_names=["exact-answer"]).stat_names, batch["rollout_stats"].tolist()))
    assert stats["tool_calls"] == 1 and stats["tool_failures"] == 0 and stats["reward"] == 0.5

    objective = GRPO(loss_type="dapo", reward_names=["exact-answer"], tools=True)
    policy = source.policy
    with torch.no_grad():
        from aura.train.objectives.grpo import completion_logps

        old, _ = completion_logps(policy, batch, temperature=1.0)
    assert objective.count(batch) == int(batch["completion_mask"].sum())  # dapo's units: model tokens only

    def loss_with(shift_at: int) -> float:
        shifted = old.clone()
        shifted[0, shift_at] -= 0.5
        return objective.loss(policy, {**batch, "old_logps": shifted})[0].item()

    base = loss_with(0) - 0  # a model token shifted: the reference value for that shift
    at_tool = loss_with(len(call_ids) + 2)
    at_answer = loss_with(len(call_ids) + len(tool_ids) + 1)
    unshifted = objective.loss(policy, {**batch, "old_logps": old})[0].item()
    assert at_tool == pytest.approx(unshifted, abs=1e-7)
    assert abs(at_answer - unshifted) > 1e-4 and abs(base - unshifted) > 1e-4


def test_a_tool_turn_past_the_length_limit_ends_the_completion_as_trl_does(env):
    from aura.train.objectives.tool_rollout import Conversation

    tok_len = []

    def engine(prompts, keys):
        tok_len.append(len(prompts))
        return [source.tok(CALL, add_special_tokens=False)["input_ids"] for _ in prompts]

    source = _source(env, engine, max_new=40)
    rows = source.my_rows(0, 0)
    completions, _ = source._draw(rows, [1, 2], own=False)
    assert tok_len == [2]  # no room for a tool turn: no second draw
    assert all(isinstance(c, Conversation) and 0 not in c.tool_mask for c in completions)
    assert source.calls == 2  # the calls ran (TRL runs them too, then drops the overlong result)


def test_the_tool_loop_appends_the_ids_and_mask_trls_tool_call_loop_does(env):
    """TRL GRPOTrainer's own ``_tool_call_loop`` (its ``_get_tool_suffix_ids`` and ``parse_response`` with
    its Qwen response template, the calculator called in-process) on the same fixed completions: the same
    completion ids (model tokens, tool turn, the answer after it) and the same ``tool_mask``, with Qwen2.5's
    own chat template (as TRL ships it). TRL cuts the tool turn at EOS, Aura at the template's end-of-turn
    token: EOS is ``<|im_end|>`` here, as in Qwen's tokenizers, so the two agree."""
    import types

    trl = pytest.importorskip("trl")
    from trl.chat_template_utils import parse_response, qwen2_5_chat_template, qwen3_template

    from aura.resources.tools.calculadora import calcular

    answer = "Son 15.\nRespuesta: 15<|im_end|>"

    def engine(prompts, keys):
        if "<tool_response>" in tok.decode(prompts[0]):
            return [tok(answer, add_special_tokens=False)["input_ids"] for _ in prompts]
        return [tok(t, add_special_tokens=False)["input_ids"] for t in (CALL + "<|im_end|>", "Respuesta: 7<|im_end|>")]

    source = _source(env, engine, max_new=256, template=qwen2_5_chat_template)
    tok = source.tok
    tok.eos_token = "<|im_end|>"
    assert "<tools>" in tok.decode(source.prompts[0].input_ids)
    rows = source.my_rows(0, 0)
    ours, _ = source._draw(rows, [1, 2], own=False)

    tok.response_template = qwen3_template  # what TRL's add_response_schema sets for Qwen2.5
    prompt_ids = [source.prompts[r].input_ids for r in rows]
    first = engine([[0]], None)
    completion_ids = [list(c) for c in first]
    post = tok(answer, add_special_tokens=False)["input_ids"]
    ns = types.SimpleNamespace(
        max_tool_calling_iterations=2,
        _sync_tool_dicts=[{"calcular": calcular}] * 2,
        _async_tool_dicts=[{}] * 2,
        use_vllm=False,
        model=types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=1024)),
        max_completion_length=source.sampling.max_new_tokens,
        _is_vlm=False,
        tools=[calcular],
        environment_factories=None,
        _generate_single_turn=lambda ids, *a, **k: ([list(post) for _ in ids], None),
        _tokenizer=tok,
        processing_class=tok,
        chat_template=None,
        chat_template_kwargs={},
    )
    ns._get_tool_suffix_ids = types.MethodType(trl.GRPOTrainer._get_tool_suffix_ids, ns)
    prompts = [[dict(m) for m in source.prompts[r].item.messages] for r in rows]
    completions = [[parse_response(tok, ids, prefix=p, tools=[calcular])] for ids, p in zip(completion_ids, prompt_ids)]
    assert completions[0][0]["tool_calls"] and not completions[1][0].get("tool_calls")
    tool_mask, _, trl_ids, *_ = trl.GRPOTrainer._tool_call_loop(
        ns, prompts, prompt_ids, completion_ids, completions, None, None, None
    )
    assert [list(c) for c in ours] == trl_ids
    assert [c.tool_mask for c in ours] == tool_mask
    assert 0 in tool_mask[0] and source.calls == 1


def test_the_validation_reward_follows_the_tool_calls_as_training_does(env):
    """``--val-fraction`` with ``--tools``: the validation's greedy completions go on after their calls through
    the training's own loop (the same ids and tool mask as a training window sampled greedily), and the reward
    reads the final turn: 15 after the calculator's 15, where a single turn (the call alone) scores 0."""
    import dataclasses

    import torch

    from aura.distributed import DistInfo
    from aura.inference.sampling import sample_batch
    from aura.train.objectives.grpo import GRPO
    from aura.train.objectives.grpo_eval import RewardEvaluator

    def greedy(prompts, keys):
        sampling = dataclasses.replace(source.sampling, temperature=0.0)
        tok = source.tok
        return sample_batch(source.policy, prompts, sampling, pad_id=tok.pad_token_id, device="cpu", tokenizer=tok)

    source = _source(env, greedy, max_new=128)
    common = dict(
        model=source.policy, rewards=source.rewards, tokenizer=source.tok, sampling=source.sampling, batch_size=2
    )
    tools = dict(tools=source.tools, max_turns=source.max_turns, end_of_turn=source.end_of_turn)
    evaluator = RewardEvaluator(source.prompts, **common, interval=1, tools=tools)
    (ours,) = evaluator.complete([p.input_ids for p in source.prompts], device=torch.device("cpu"))
    (batch,) = source.window(0, 0)
    p = batch["input_ids"].shape[1] - batch["completion_mask"].shape[1]
    assert 0 in ours.tool_mask  # a call made, its tool turn appended
    assert batch["input_ids"][0, p : p + len(ours)].tolist() == list(ours)
    assert batch["completion_mask"][0, : len(ours)].tolist() == ours.tool_mask
    stats = dict(zip(GRPO(tools=True, reward_names=["exact-answer"]).stat_names, batch["rollout_stats"].tolist()))
    scores = evaluator(source.policy, dist=DistInfo())
    assert scores["val_reward/exact-answer"] == stats["reward"] == 1.0
    assert RewardEvaluator(source.prompts, **common, interval=1)(source.policy, dist=DistInfo())["val_reward"] == 0


# ---------------------------------------------------------------------------------------------------
# The CLI


def test_grpo_with_the_calculator_calls_it_and_resumes_exactly_after_sigterm_and_kill_9(env, tmp_path):
    """The shipped calculator on a tiny model that learnt to call it: real sandboxed calls, logged
    (``tool_calls``, ``tool_failures``). A run stopped by SIGTERM after step 1 saves an interrupt checkpoint
    (exit 3); resumed, saving every step, it is killed -9 once the next step is saved; resumed again, it
    finishes: every step logs what the straight run logged (the conversations, their calls and rewards)."""

    straight, run = tmp_path / "straight", tmp_path / "interrupted"
    common = [
        "--base-model",
        env["model"],
        "--data",
        env["data"],
        *FAST,
        "--num-generations",
        2,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        1,
        "--max-completion-length",
        128,
        "--max-steps",
        4,
        "--reward",
        "exact-answer",
        "--reward",
        "length:0.1",
        "--tools",
        CALCULATOR,
        "--max-tool-turns",
        2,
        "--val-fraction",
        0,
    ]
    out = finetune(*common, "--output-dir", straight, "--save-steps", 0)
    assert "Tools from" in out and "calcular" in out
    text, stopped = run_aura_terminated(
        "finetune", *common, "--output-dir", run, "--save-steps", 0, run=run, at="Step 1/4"
    )
    assert stopped < 4, text
    out = run_aura_killed(
        "finetune",
        *common,
        "--output-dir",
        run,
        "--save-steps",
        1,
        "--resume-from",
        "latest",
        saved_in=run,
    )
    assert "Resumed from" in out and not (run / "final").exists()
    out = finetune(*common, "--output-dir", run, "--save-steps", 0, "--resume-from", "latest")
    assert "Resumed from" in out
    a, b = step_rows(straight), step_rows(run)
    assert set(a) == set(b) == {1, 2, 3, 4}
    keys = ["train_loss", "reward", "completion_length", "entropy", "clip_ratio", "tool_calls", "tool_failures"]
    for step in a:
        assert [a[step][k] for k in keys] == [b[step][k] for k in keys], step
    assert sum(float(r["tool_calls"]) for r in a.values()) >= 4  # real sandboxed calls, most steps
    assert any(float(r["reward_std"]) > 0 for r in a.values())  # a signal: the loss trained something
    # a final turn answered 15 after reading the tool's 15
    assert max(float(r["rewards/exact-answer/mean"]) for r in a.values()) > 0


@pytest.mark.parametrize(
    "flags,words",
    [
        (["--max-tool-turns", "3"], "--max-tool-turns only has an effect with --tools"),
        (["--tools", "no_existe.py"], "--tools no_existe.py: the file does not exist"),
        (["--tools", str(CALCULATOR), "--rollout-engine", "vllm"], "--tools does not work with --rollout-engine vllm"),
    ],
)
def test_tool_flags_are_checked_before_anything_runs(env, tmp_path, flags, words):
    base = ["--base-model", env["model"], "--output-dir", tmp_path / "o", "--objective", "grpo"]
    assert words in finetune(*base, *flags, expect=2)


@pytest.mark.dist
@pytest.mark.slow
def test_grpo_with_tools_under_ddp_fsdp2_and_deepspeed_equals_one_process(env, tmp_path):
    """2 gloo ranks, a prompt's group spread over both: the same conversations (their keys and their turns'
    keys do not depend on the rank), tool calls (summed over ranks), rewards and losses as one process, under
    DDP, FSDP2 (each rank's multi-turn rollouts, of their own lengths, on the gathered weights:
    ``aura.distributed.whole_weights``) and DeepSpeed ZeRO-2."""
    from tests.distutil import output, torchrun

    common = [
        str(a)
        for a in (
            "--base-model",
            env["model"],
            "--data",
            env["data"],
            *FAST,
            "--max-completion-length",
            128,
            "--max-steps",
            2,
            "--reward",
            "exact-answer",
            "--reward",
            "length:0.1",
            "--tools",
            CALCULATOR,
            "--max-tool-turns",
            2,
            "--val-fraction",
            0,
        )
    ]
    single = tmp_path / "single"
    finetune(*common, "--batch-size", 2, "--output-dir", single)
    a = step_rows(single)
    assert sum(float(r["tool_calls"]) for r in a.values()) > 0
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    for name, how in (("ddp", []), ("fsdp", ["--strategy", "fsdp"]), ("deepspeed", ["--deepspeed", str(ds)])):
        out = tmp_path / name
        r = torchrun(
            "-m", "aura", "finetune", *common, *how, "--batch-size", "1", "--backend", "gloo", "--output-dir", str(out)
        )
        assert r.returncode == 0, output(r)[-4000:]
        b = step_rows(out)
        assert set(a) == set(b) == {1, 2}, name
        for step in a:
            for key in ("train_loss", "reward", "completion_length", "entropy", "tool_calls", "tool_failures"):
                assert float(b[step][key]) == pytest.approx(float(a[step][key]), rel=1e-5, abs=1e-6), (name, step, key)
