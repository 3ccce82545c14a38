"""Instruction data: formats -> conversations, label masking per template (token by token), packing,
the resumable rank-aware data source, and the errors a user can cause."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from aura.core.errors import AuraError
from aura.data.sft import Conversation, load_conversations, record_to_conversation, split_train_val
from aura.data.sft_batches import IGNORE_INDEX, SFTDataSource, collate, encode, encode_all, pack, pack_batch
from aura.text.templates import TEMPLATE_TOKENS, TEMPLATES, resolve_chat_template
from tests.tiny_models import build_gpt2, build_llama, train_tokenizer

CONV = [
    {"role": "system", "content": "Eres un asistente que responde en español."},
    {"role": "user", "content": "¿Cuál es la capital de Perú?"},
    {"role": "assistant", "content": "La capital de Perú es Lima."},
    {"role": "user", "content": "¿Y la de Chile?"},
    {"role": "assistant", "content": "Santiago de Chile, a orillas del río Mapocho."},
]
# What each template puts after an assistant message (trained with it, so the model learns to stop).
END = {"mistral": "{eos}", "llama3": "<|eot_id|>", "chatml": "<|im_end|>", "aura": "<|im_end|>", "alpaca": "{eos}"}
BEFORE = {"mistral": " "}  # Mistral puts a space between [/INST] and the answer


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tok"), vocab_size=600, chat_template=False)


def _tokenizer(tok_dir, template: str | None = None):
    from aura.tokenizer.loading import load_tokenizer

    tok = load_tokenizer(str(tok_dir))
    if template:
        extra = [t for t in TEMPLATE_TOKENS[template] if t not in tok.get_vocab()]
        if extra:  # what a Mistral / Llama 3 tokenizer has as single tokens
            tok.add_tokens(extra, special_tokens=True)
        resolve_chat_template(tok, template)
    return tok


def _trained_runs(ids, labels):
    """(start index, token ids) of every maximal run of trained tokens."""
    runs, cur, start = [], [], None
    for i, (t, lab) in enumerate(zip(ids, labels)):
        if lab != IGNORE_INDEX:
            assert lab == t, "a trained label must be the token itself (the loop shifts)"
            if not cur:
                start = i
            cur.append(t)
        elif cur:
            runs.append((start, cur))
            cur = []
    if cur:
        runs.append((start, cur))
    return runs


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_labels_mask_prompts_token_by_token(tok_dir, template):
    tok = _tokenizer(tok_dir, template)
    ex = encode(Conversation(messages=CONV, where="t"), tok)
    rendered = tok.apply_chat_template(CONV, tokenize=False)
    assert tok.decode(ex.input_ids) == rendered  # nothing lost or added
    runs = _trained_runs(ex.input_ids, ex.labels)
    answers = [m for m in CONV if m["role"] == "assistant"]
    assert len(runs) == len(answers), "one trained span per assistant turn"
    for k, ((start, run), msg) in enumerate(zip(runs, answers)):
        want = BEFORE.get(template, "") + msg["content"] + END[template].format(eos=tok.eos_token)
        assert tok.decode(run) == want  # exactly the answer and its end-of-turn token
        # every token before the span is the prompt as rendered for generation
        prefix = tok.apply_chat_template(CONV[: CONV.index(msg)], tokenize=False, add_generation_prompt=True)
        assert tok.decode(ex.input_ids[:start]) == prefix
    # an independent derivation (token counts of the rendered prefixes, the slow-tokenizer path) agrees
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(tok), "is_fast", property(lambda self: False))
        assert encode(Conversation(messages=CONV), tok).labels == ex.labels
    user_text = "".join(tok.decode([t]) for t, lab in zip(ex.input_ids, ex.labels) if lab == IGNORE_INDEX)
    assert "capital de Perú" in user_text and "Lima" not in user_text


def test_train_on_prompt_trains_everything_but_the_first_token(tok_dir):
    tok = _tokenizer(tok_dir, "chatml")
    ex = encode(Conversation(messages=CONV), tok, train_on_prompt=True)
    assert ex.labels[0] == IGNORE_INDEX and ex.labels[1:] == ex.input_ids[1:]


def test_model_own_template_wins_and_missing_template_is_an_error(tok_dir):
    tok = _tokenizer(tok_dir)
    with pytest.raises(AuraError, match="mistral, llama3, chatml, alpaca, aura"):
        resolve_chat_template(tok, None)
    tok.chat_template = TEMPLATES["chatml"]
    assert resolve_chat_template(tok, None)[1] == "chatml"
    assert resolve_chat_template(tok, "alpaca")[1] == "alpaca" and tok.chat_template == TEMPLATES["alpaca"]


RECORDS = [
    {"system": "Sé breve.", "instruction": "Traduce al inglés", "input": "buenos días", "response": "Good morning."},
    {"system": "", "instruction": "¿Cuánto es 2 + 2?", "input": "", "response": "Cuatro."},
]


def _expected(rec):
    msgs = [{"role": "system", "content": rec["system"]}] if rec["system"] else []
    user = rec["instruction"] + (f"\n\n{rec['input']}" if rec["input"] else "")
    return msgs + [{"role": "user", "content": user}, {"role": "assistant", "content": rec["response"]}]


def _write_formats(d):
    paths = {}
    for ext, delim in (("csv", ","), ("tsv", "\t")):
        p = d / f"data.{ext}"
        with open(p, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=["instruction", "input", "response", "system"], delimiter=delim)
            w.writeheader()
            w.writerows(RECORDS)
        paths[ext] = p
    variants = {
        "jsonl_instruction": RECORDS,
        "jsonl_prompt": [
            {"system": r["system"], "prompt": r["instruction"], "input": r["input"], "completion": r["response"]}
            for r in RECORDS
        ],
        "jsonl_messages": [{"messages": _expected(r)} for r in RECORDS],
        "jsonl_sharegpt": [
            {
                "conversations": [
                    {"from": {"user": "human", "assistant": "gpt"}.get(m["role"], m["role"]), "value": m["content"]}
                    for m in _expected(r)
                ]
            }
            for r in RECORDS
        ],
    }
    for name, recs in variants.items():
        p = d / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
        paths[name] = p
    (d / "array.json").write_text(json.dumps(RECORDS, ensure_ascii=False), encoding="utf-8")
    paths["json"] = d / "array.json"
    import datasets

    datasets.Dataset.from_list([{"messages": _expected(r)} for r in RECORDS]).save_to_disk(str(d / "hf"))
    paths["hf_disk"] = d / "hf"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(RECORDS), d / "data.parquet")
    paths["parquet"] = d / "data.parquet"
    return paths


def test_every_format_parses_to_the_same_conversations(tmp_path):
    paths = _write_formats(tmp_path)
    want = [_expected(r) for r in RECORDS]
    for name, p in paths.items():
        got = [c.messages for c in load_conversations(p)]
        assert got == want, name


def test_embedded_spanish_sample_is_the_default():
    convs = load_conversations(None)
    assert len(convs) == 251
    assert all(c.messages[-1]["role"] == "assistant" and c.messages[-1]["content"] for c in convs)


def test_preformatted_text_masks_like_the_template(tok_dir, tmp_path, capsys):
    tok = _tokenizer(tok_dir, "mistral")
    convs = [CONV[1:3], CONV[1:]]  # one and two turns
    p = tmp_path / "mistral.jsonl"
    lines = [json.dumps({"text": tok.apply_chat_template(c, tokenize=False)}) for c in convs]
    lines.append(json.dumps({"text": "Un texto sin marcadores de respuesta."}))
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = load_conversations(p)
    for conv, c in zip(loaded[:2], convs):
        from_text = encode(conv, tok)
        from_messages = encode(Conversation(messages=c), tok)
        assert (from_text.input_ids, from_text.labels) == (from_messages.input_ids, from_messages.labels)
    encode_all(loaded, tok, max_length=512)
    assert "no response marker" in capsys.readouterr().err
    plain = encode(loaded[2], tok)
    assert plain.labels[1:] == plain.input_ids[1:] and tok.decode(plain.input_ids).endswith(tok.eos_token)


# ---------------------------------------------------------------------------------------------------
# Bad input


def test_csv_without_the_columns_lists_those_found(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("pregunta,respuesta\nhola,adiós\n", encoding="utf-8")
    with pytest.raises(AuraError, match="Columns found: pregunta, respuesta"):
        load_conversations(p)


def test_empty_responses_fail_or_are_skipped(tmp_path, capsys):
    p = tmp_path / "empty.csv"
    p.write_text("instruction,response\nuno,sí\ndos,\ntres,  \ncuatro,vale\n", encoding="utf-8")
    with pytest.raises(AuraError, match=r"2 examples have an empty response \(e.g. .*line 3"):
        load_conversations(p, empty_responses="fail")
    convs = load_conversations(p, empty_responses="skip")
    assert [c.messages[0]["content"] for c in convs] == ["uno", "cuatro"]
    assert "Skipped 2 examples" in capsys.readouterr().err


@pytest.mark.parametrize(
    "messages, match",
    [
        ([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], "line 2, message 2: unknown role 'bot'"),
        (
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
            "line 2, message 2: expected role 'assistant'",
        ),
        ([{"role": "assistant", "content": "a"}], "line 2, message 1: expected role 'user'"),
        ([{"role": "user", "content": "a"}], "line 2, message 2: expected role 'assistant'"),
        ("no es una lista", "line 2: invalid JSON"),
    ],
)
def test_bad_messages_name_the_record(tmp_path, messages, match):
    p = tmp_path / "m.jsonl"
    ok = {"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}
    p.write_text(json.dumps(ok) + "\n" + json.dumps({"messages": messages}) + "\n", encoding="utf-8")
    with pytest.raises(AuraError, match=match):
        load_conversations(p)


def test_unknown_record_schema_and_bad_json_name_the_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"pregunta": "a"}\n', encoding="utf-8")
    with pytest.raises(AuraError, match="line 1: .*Fields found: pregunta"):
        load_conversations(p)
    p.write_text('{"text": "a"}\n{roto\n', encoding="utf-8")
    with pytest.raises(AuraError, match="line 2: invalid JSON"):
        load_conversations(p)
    with pytest.raises(AuraError, match="does not exist"):
        load_conversations(tmp_path / "nope.csv")


def test_too_long_examples_are_dropped_or_truncated_and_reported(tok_dir, capsys):
    tok = _tokenizer(tok_dir, "chatml")
    short = Conversation(
        messages=[{"role": "user", "content": "Hola"}, {"role": "assistant", "content": "Hola."}], where="f, line 2"
    )
    long_ = Conversation(
        messages=[{"role": "user", "content": "Hola"}, {"role": "assistant", "content": "palabra " * 200}],
        where="f, line 3",
    )
    n_short = len(encode(short, tok).input_ids)
    out = encode_all([short, long_], tok, max_length=n_short + 5)
    assert len(out) == 1 and "Dropped 1 example longer than --max-length" in capsys.readouterr().err
    out = encode_all([short, long_], tok, max_length=n_short + 5, truncation="truncate")
    assert len(out) == 2 and len(out[1].input_ids) == n_short + 5
    assert "f, line 3" in capsys.readouterr().err
    with pytest.raises(AuraError, match="No example fits"):
        encode_all([long_], tok, max_length=8)


# ---------------------------------------------------------------------------------------------------
# Split, data source, packing


def test_validation_split_is_deterministic_and_disjoint():
    items = list(range(100))
    tr, va = split_train_val(items, val_fraction=0.05, seed=1)
    assert len(va) == 5 and sorted(tr + va) == items
    assert split_train_val(items, val_fraction=0.05, seed=1) == (tr, va)
    assert split_train_val(items, val_fraction=0.05, seed=2)[1] != va
    assert len(split_train_val(items[:3], val_fraction=0.05, seed=0)[1]) == 1
    assert split_train_val(items[:1], val_fraction=0.5, seed=0) == ([0], [])


def _fake_examples(n):
    from aura.data.sft_batches import Encoded

    return [
        Encoded(input_ids=[100 + i] * (3 + i % 5), labels=[IGNORE_INDEX] + [100 + i] * (2 + i % 5), where=str(i))
        for i in range(n)
    ]


def _ids_of(batch):
    return sorted({int(t) for t in batch["input_ids"].flatten() if t >= 100})


def test_data_source_shuffles_per_epoch_shards_ranks_and_resumes():
    ex = _fake_examples(23)
    src = SFTDataSource(ex, batch_size=4, pad_id=0, seed=3)
    epoch0 = [_ids_of(src.batch(0, i)) for i in range(len(src))]
    assert sorted(sum(epoch0, [])) == list(range(100, 123))  # every example once per epoch
    assert epoch0 == [_ids_of(SFTDataSource(ex, batch_size=4, pad_id=0, seed=3).batch(0, i)) for i in range(len(src))]
    assert epoch0 != [_ids_of(src.batch(1, i)) for i in range(len(src))]
    # 2 ranks x batch 2 see exactly what 1 process x batch 4 sees, step by step
    ranks = [SFTDataSource(ex, batch_size=2, pad_id=0, seed=3, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 6
    for i in range(5):  # the last step holds padding repeats on rank 1
        assert sorted(_ids_of(ranks[0].batch(0, i)) + _ids_of(ranks[1].batch(0, i))) == epoch0[i]
    # resume: a fresh source with the saved state continues exactly
    for _ in range(3):
        src.next_batch()
    state = src.state_dict()
    rest = [src.next_batch() for _ in range(len(src) - 3)]
    assert src.next_batch() is None
    again = SFTDataSource(ex, batch_size=4, pad_id=0, seed=3)
    again.load_state_dict(state)
    for a, b in zip(rest, [again.next_batch() for _ in range(len(rest))]):
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])
    with pytest.raises(AuraError, match="seed"):
        SFTDataSource(ex, batch_size=4, pad_id=0, seed=4).load_state_dict(state)


def test_collate_pads_with_ignored_labels():
    ex = _fake_examples(2)
    b = collate([[ex[0]], [ex[1]]], pad_id=7)
    assert b["input_ids"].shape == (2, 4) and b["input_ids"][0, 3] == 7
    assert b["labels"][0, 3] == IGNORE_INDEX and b["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


@pytest.mark.parametrize("packing", [False, True])
def test_collate_puts_each_example_where_its_row_says(packing):
    """Random rows of random examples, read back slice by slice: each example's ids and labels in order, its
    positions from 0 (packed), then the row's padding (pad id, IGNORE_INDEX, its own positions from 0, mask 0);
    the width rounded up to the buckets."""
    import random

    from aura.data.sft_batches import Encoded, length_buckets

    r = random.Random(1)
    buckets = length_buckets(512, smallest=16)
    for _ in range(40):
        rows = []
        for _ in range(r.randint(1, 6)):
            row = []
            for _ in range(r.randint(1, 4) if packing else 1):
                n = r.randint(1, 60)
                ids = [r.randrange(5, 1000) for _ in range(n)]
                row.append(Encoded(ids, [IGNORE_INDEX if r.random() < 0.3 else t for t in ids]))
            rows.append(row)
        b = collate(rows, pad_id=3, packing=packing, buckets=buckets)
        widths = [sum(len(e.input_ids) for e in row) for row in rows]
        T = b["input_ids"].shape[1]
        assert b["input_ids"].shape == b["labels"].shape == (len(rows), T)
        assert T == min(w for w in buckets if w >= max(widths))
        assert all(v.dtype == torch.long for v in b.values())
        for i, row in enumerate(rows):
            at = 0
            for e in row:
                n = len(e.input_ids)
                assert b["input_ids"][i, at : at + n].tolist() == e.input_ids
                assert b["labels"][i, at : at + n].tolist() == e.labels
                if packing:
                    assert b["position_ids"][i, at : at + n].tolist() == list(range(n))
                at += n
            assert b["input_ids"][i, at:].tolist() == [3] * (T - at)
            assert b["labels"][i, at:].tolist() == [IGNORE_INDEX] * (T - at)
            if packing:
                assert b["position_ids"][i, at:].tolist() == list(range(T - at))
            else:
                assert b["attention_mask"][i].tolist() == [1] * at + [0] * (T - at)
        if packing:
            assert "attention_mask" not in b and int(b["input_tokens"]) == sum(widths)
        else:
            assert set(b) == {"input_ids", "labels", "attention_mask"}


def test_pack_fills_rows_without_exceeding_max_length():
    lengths = [7, 5, 3, 3, 2, 9, 1]
    rows = pack(lengths, 10)
    assert sorted(i for r in rows for i in r) == list(range(7))
    assert all(sum(lengths[i] for i in r) <= 10 for r in rows) and len(rows) == 3


def test_a_micro_batch_is_packed_only_where_it_computes_less_of_both():
    """``pack_batch``: short sequences go beside a long one in its width; a wider row is taken only where it
    lowers the tokens computed without raising the attention (dense mask); never more of either than one
    sequence per row, over many random batches, with and without a rounding of the width."""
    import random

    def plain(width: int) -> int:
        return width

    assert pack_batch([40, 12, 10, 9, 8], plain) == [[0], [1, 2, 3, 4]]  # the long one's width, no wider
    assert pack_batch([400, 100], plain) == [[0, 1]]  # one row of 500: fewer tokens, less attention
    assert pack_batch([400, 250], plain) == [[0], [1]]  # one row of 650 would have more attention
    assert pack_batch([400, 400, 30, 30], plain) == [[0, 2], [1, 3]]  # the longest plus another
    assert pack_batch([400, 100], plain, limit=256) == [[0], [1]]  # no row wider than the last bucket
    r = random.Random(0)
    for multiple in (1, 64):

        def fit(width: int, m=multiple) -> int:
            return -(-width // m) * m

        for _ in range(300):
            lengths = [max(1, int(r.lognormvariate(5, 0.8))) for _ in range(r.randint(1, 12))]
            rows = pack_batch(lengths, fit)
            assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
            width = fit(max(sum(lengths[i] for i in row) for row in rows))
            alone = fit(max(lengths))
            assert len(rows) * width <= len(lengths) * alone
            assert len(rows) * width**2 <= len(lengths) * alone**2


@pytest.mark.parametrize("arch, attn", [("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa")])
def test_packed_rows_give_the_logits_of_each_example_alone(tok_dir, tmp_path_factory, arch, attn):
    from transformers import AutoModelForCausalLM

    from aura.train.adapters import packing_is_isolated

    model_dir = tmp_path_factory.getbasetemp() / f"{arch}_pack"
    if not model_dir.exists():
        (build_llama if arch == "llama" else build_gpt2)(model_dir, tok_dir, ctx=512)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn).eval()
    assert packing_is_isolated(model)

    class IgnoresPositions(torch.nn.Module):  # what an architecture without packed-sequence masks does
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config = inner, inner.config

        def get_input_embeddings(self):
            return self.inner.get_input_embeddings()

        def forward(self, input_ids, position_ids=None, use_cache=False):
            return self.inner(input_ids=input_ids, use_cache=False)

    assert not packing_is_isolated(IgnoresPositions(model).eval())
    tok = _tokenizer(tok_dir, "chatml")
    examples = encode_all(load_conversations(None)[:8], tok, max_length=300)
    src = SFTDataSource(examples, batch_size=2, pad_id=tok.pad_token_id, packing=True, max_length=300, shuffle=False)
    multi = 0
    for index in range(len(src)):
        batch = src.batch(0, index)
        assert "attention_mask" not in batch and batch["position_ids"].shape == batch["input_ids"].shape
        with torch.no_grad():
            packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
            # (B, T, V); the same rows attending across examples:
            leaky = model(input_ids=batch["input_ids"], use_cache=False).logits
            for b, r in enumerate(src._rank_rows(0)[index * 2 : index * 2 + 2]):
                pos = 0
                multi += len(src.rows[r]) > 1
                for i in src.rows[r]:
                    ids = torch.tensor([examples[i].input_ids])
                    alone = model(input_ids=ids).logits[0]  # (n, V)
                    n = ids.shape[1]
                    torch.testing.assert_close(packed[b, pos : pos + n], alone, atol=2e-5, rtol=1e-4)
                    if pos > 0:
                        assert not torch.allclose(leaky[b, pos : pos + n], alone, atol=1e-3)
                    pos += n
        # a packed example's first token is never a target of the previous one
        assert (batch["labels"][batch["position_ids"] == 0] == IGNORE_INDEX).all()
    assert multi >= 2, "the test needs rows holding several examples"


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_padding_free_micro_batches_give_the_padded_losses_in_fewer_rows(tok_dir, tmp_path_factory, arch):
    """``SFTDataSource(padding_free=True)``: each micro-batch holds the same examples as the padded one, in fewer
    rows where its lengths differ enough, and gives the same summed token loss, target count and real-token
    count (throughput), whatever ``batch`` it is."""
    from transformers import AutoModelForCausalLM

    from aura.data.sft_batches import Encoded
    from aura.train.objectives.objective import count_inputs, count_targets, plain_token_loss_sum

    model_dir = tmp_path_factory.getbasetemp() / f"{arch}_pack"
    if not model_dir.exists():
        (build_llama if arch == "llama" else build_gpt2)(model_dir, tok_dir, ctx=512)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    examples = []
    for n in (60, 9, 14, 7, 55, 48, 12, 5, 30, 8, 6, 40):  # lengths that pack in some micro-batches, not all
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        examples.append(Encoded(ids, [IGNORE_INDEX] * (n // 3) + ids[n // 3 :]))
    common = dict(batch_size=4, pad_id=0, seed=3, max_length=128)
    padded, free = SFTDataSource(examples, **common), SFTDataSource(examples, **common, padding_free=True)
    fewer = 0
    for index in range(len(padded)):
        a, b = padded.batch(0, index), free.batch(0, index)
        assert _ids_of(a) == _ids_of(b)
        fewer += b["input_ids"].shape[0] < a["input_ids"].shape[0]
        assert b["input_ids"].numel() <= a["input_ids"].numel()
        with torch.no_grad():
            torch.testing.assert_close(
                plain_token_loss_sum(model, b), plain_token_loss_sum(model, a), rtol=1e-5, atol=1e-4
            )
        assert count_targets(b) == count_targets(a) and count_inputs(b) == count_inputs(a)
    assert fewer >= 1, "the test needs a micro-batch in fewer rows"


def test_record_to_conversation_rejects_non_objects():
    with pytest.raises(AuraError, match="r1"):
        record_to_conversation(["a"], "r1")


def _hub_layout(root, rows: list[dict]):
    """A local folder laid out as the hub serves a parquet dataset (``data/train-00000-of-00001.parquet``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "train-00000-of-00001.parquet")
    return root


def test_the_72h_pipelines_hub_datasets_stream_in_their_own_columns(tmp_path, monkeypatch):
    """The SFT and DPO datasets a100-72h names, as their cards give their columns (OpenHermes-2.5-Spanish:
    ShareGPT ``conversations`` with from system/human/gpt plus its other fields; orpo-es: prompt, chosen,
    rejected), read through the hub's streaming code (``datasets.load_dataset(..., streaming=True)``) from a
    local copy: every row becomes a conversation or a pair as it is, no column mapping needed."""
    from aura.data.hub_datasets import CATALOGUE
    from aura.data.preference import record_to_pair
    from aura.data.sft import iter_records
    from aura.text.sources import Source

    hermes = [
        {
            "conversations": [
                {"from": "system", "value": "Eres un asistente útil.", "weight": None},
                {"from": "human", "value": "¿Cuál es la capital de Perú?", "weight": None},
                {"from": "gpt", "value": "Lima.", "weight": 1.0},
            ],
            "category": "geografía",
            "source": "airoboros2.2",
            "id": None,
        },
        {
            "conversations": [
                {"from": "human", "value": "Di hola.", "weight": None},
                {"from": "gpt", "value": "Hola.", "weight": None},
            ],
            "category": None,
            "source": "glaive-code-assist",
            "id": "x1",
        },
    ]
    orpo = [
        {
            "prompt": "¿Qué es la fotosíntesis?",
            "chosen": "Es el proceso por el que las plantas fabrican su alimento con la luz.",
            "rejected": "No lo sé.",
        }
    ]
    import datasets

    from aura.data import sft

    cache = tmp_path / "hf-cache"  # streamed: no arrow copy of the dataset is written anywhere
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    local = _hub_layout(tmp_path / "Iker" / "OpenHermes-2.5-Spanish", hermes)
    convs = [
        record_to_conversation(rec, where) for where, rec in sft._hf_records(Source("hf_hub", str(local)), "train")
    ]
    assert [c.messages for c in convs] == [
        [
            {"role": "system", "content": "Eres un asistente útil."},
            {"role": "user", "content": "¿Cuál es la capital de Perú?"},
            {"role": "assistant", "content": "Lima."},
        ],
        [{"role": "user", "content": "Di hola."}, {"role": "assistant", "content": "Hola."}],
    ]
    local = _hub_layout(tmp_path / "SiguienteGlobal" / "orpo-es-v0.0.2", orpo)
    pairs = [record_to_pair(rec, where) for where, rec in sft._hf_records(Source("hf_hub", str(local)), "train")]
    assert pairs[0].prompt == [{"role": "user", "content": "¿Qué es la fotosíntesis?"}]
    assert (pairs[0].chosen["role"], pairs[0].rejected["content"]) == ("assistant", "No lo sé.")
    # the same folders read as local files give the same records (the offline copy a user may keep)
    assert [r for _, r in iter_records(str(local))] == orpo
    assert not list(cache.rglob("*.arrow")), list(cache.rglob("*"))
    assert {d.kind for d in CATALOGUE.values()} == {"sft", "preference"}


def _sized(lengths: list[int]) -> list:
    """Examples of ``lengths`` tokens, example i's tokens all 100 + i."""
    from aura.data.sft_batches import Encoded

    return [Encoded([100 + i] * n, [IGNORE_INDEX] + [100 + i] * (n - 1), where=str(i)) for i, n in enumerate(lengths)]


def _computed(batches: list[dict]) -> tuple[int, int]:
    """(tokens, attention) of collated micro-batches: rows x width, rows x width^2."""
    return sum(b["input_ids"].numel() for b in batches), sum(
        b["input_ids"].numel() * b["input_ids"].shape[1] for b in batches
    )


@pytest.mark.parametrize(
    "shapes",
    [{}, {"padding_free": True}, {"buckets": (32, 64, 128, 256)}, {"pad_to_multiple_of": 8}, {"packing": True}],
)
def test_a_steps_micro_batches_go_longest_first_where_that_computes_less(shapes):
    """``window`` (the loop's accumulation): each optimizer step's micro-batches hold the examples of the data order,
    in micro-batches of its sizes, longest first where that computes fewer tokens and no more attention (or less
    attention and no more tokens), else in the data order; what the source reckons is what the collated batches
    compute. A fresh source gives the same batches, and resume continues exactly."""
    import random

    r = random.Random(0)
    examples = _sized([min(250, int(r.lognormvariate(0, 0.8) * 40) + 3) for _ in range(61)])
    common = dict(batch_size=3, pad_id=0, seed=5, max_length=256, **shapes)
    plain, tidy = SFTDataSource(examples, **common), SFTDataSource(examples, **common, window=4)
    steps = [range(first, min(first + 4, len(plain))) for first in range(0, len(plain), 4)]  # the last one is short
    for epoch in (0, 1):
        before, after = [0, 0], [0, 0]
        for step in steps:
            a, b = [plain.batch(epoch, i) for i in step], [tidy.batch(epoch, i) for i in step]
            assert sorted(t for x in a for t in _ids_of(x)) == sorted(t for x in b for t in _ids_of(x))
            assert [len(tidy.batch_rows(epoch, i)) for i in step] == [len(plain.batch_rows(epoch, i)) for i in step]
            cost_a, cost_b = _computed(a), _computed(b)
            assert tidy._cost([tidy.batch_rows(epoch, i) for i in step]) == cost_b
            assert cost_b[0] <= cost_a[0] and cost_b[1] <= cost_a[1]
            if cost_b == cost_a:  # nothing to gain: the data order
                assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
            before, after = [u + v for u, v in zip(before, cost_a)], [u + v for u, v in zip(after, cost_b)]
        assert after[0] < before[0] and after[1] < before[1], (shapes, before, after)
    fresh = SFTDataSource(examples, **common, window=4)
    assert all(torch.equal(fresh.batch(1, i)["input_ids"], tidy.batch(1, i)["input_ids"]) for i in range(len(tidy)))
    done = 4 * (len(steps) // 2)  # some steps
    for _ in range(done):
        tidy.next_batch()
    state, rest = tidy.state_dict(), [tidy.next_batch() for _ in range(len(tidy) - done)]
    fresh.load_state_dict(state)
    assert rest and all(torch.equal(x["input_ids"], fresh.next_batch()["input_ids"]) for x in rest)
    # another layout (2 ranks x batch 3 x 2 micro-batches per step: the same rows per step) resumes at the same
    # step's start, and a position inside a step at that step's start
    for k in range(2):
        rank = SFTDataSource(examples, **{**common, "world_size": 2, "rank": k}, window=2)
        rank.load_state_dict(state)
        assert rank.position == done // 2
        rank.load_state_dict({**state, "position": done + 1})
        assert rank.position == done // 2


def test_sorting_is_kept_only_where_it_computes_less():
    """Padding-free micro-batches where a long example packs with short ones in data order: sorted by length, the
    two long ones would fill a micro-batch of their own and compute more, so the data order stays; padded, the
    same examples go longest first."""
    examples = _sized([100, 10, 10, 100, 12, 10])
    common = dict(batch_size=3, pad_id=0, shuffle=False, window=2)
    free = SFTDataSource(examples, **common, padding_free=True)
    assert [free.batch_rows(0, i) for i in range(2)] == [[0, 1, 2], [3, 4, 5]]
    assert [b["input_ids"].shape for b in (free.batch(0, 0), free.batch(0, 1))] == [(1, 120), (1, 122)]
    padded = SFTDataSource(examples, **common)
    assert [padded.batch_rows(0, i) for i in range(2)] == [[0, 3, 4], [1, 2, 5]]


@pytest.mark.parametrize("padding_free", [False, True])
def test_a_step_sorted_by_length_gives_the_data_orders_loss_and_gradients(tok_dir, tmp_path_factory, padding_free):
    """The micro-batches of a step sorted by length sum the same token loss, over the same targets, with the same
    gradients as in the data order (what the loop's step is: ``aura.train.loop``), from fewer tokens."""
    from transformers import AutoModelForCausalLM

    from aura.data.sft_batches import Encoded
    from aura.train.objectives.objective import count_targets, plain_token_loss_sum

    model_dir = tmp_path_factory.getbasetemp() / "llama_pack"
    if not model_dir.exists():
        build_llama(model_dir, tok_dir, ctx=512)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
    vocab = model.get_input_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(0)
    examples = []
    for n in (60, 9, 14, 7, 55, 48, 12, 5, 30, 8, 6, 40, 11, 52, 9, 20):
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        examples.append(Encoded(ids, [IGNORE_INDEX] * (n // 3) + ids[n // 3 :]))
    common = dict(batch_size=4, pad_id=0, seed=0, max_length=128, padding_free=padding_free)

    def step(source) -> tuple:
        model.zero_grad(set_to_none=True)
        batches = [source.batch(0, i) for i in range(4)]
        loss = sum(plain_token_loss_sum(model, b) for b in batches)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        return loss.detach(), grads, sum(count_targets(b) for b in batches), _computed(batches)[0]

    plain, tidy = step(SFTDataSource(examples, **common)), step(SFTDataSource(examples, **common, window=4))
    torch.testing.assert_close(tidy[0], plain[0], rtol=1e-5, atol=1e-4)
    for x, y in zip(tidy[1], plain[1]):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)  # sums of up to 500 token losses
    assert tidy[2] == plain[2] and tidy[3] < plain[3]
