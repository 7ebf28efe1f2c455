"""Chat / SFT data (issue 18, part 4): JSONL conversations rendered with a chat template,
the loss on the assistant's content and end token only."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import feedline as fl
from feedline.errors import DomainError, FormatError
from feedline.formats import nndataset as nnd
from feedline.text import CHAT_SPECIALS, BPETokenizer, ByteTokenizer, ChatTemplate, Input, build

CHATS = [
    [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Café?"},
        {"role": "assistant", "content": "Oui, é."},
    ],
    [{"role": "user", "content": "no answer"}],
    [],
    [{"role": "assistant", "content": "starts talking"}],
]


def write_chats(path, chats, field="messages"):
    with open(path, "w", encoding="utf-8") as f:
        for c in chats:
            f.write(json.dumps({field: c, "id": 1}) + "\n")


def docs_and_masks(path):
    if str(path).endswith(".flr"):
        with fl.recfile.open(path) as f:
            t, m = f.columns["tokens"], f.columns["loss_mask"]
            cut = [slice(t.offsets[i], t.offsets[i + 1]) for i in range(len(f))]
            return [(t.values[s].astype(np.int64), m.values[s].copy()) for s in cut]
    with nnd.open(path) as ds:
        docs = [ds.text_doc("train", i) for i in range(ds.info.num_docs)]
        return [(d.tokens.astype(np.int64), np.asarray(d.loss_mask)) for d in docs]


def expected(tok, chat):
    """The template written out by hand: begin, content, end per message; the mask True
    on the assistant's content and end."""
    ids, mask = [], []
    for m in chat:
        content = tok.encode_batch([m["content"]])[0].tolist()
        ids += [tok.special_id(f"<|{m['role']}|>"), *content]
        ids.append(tok.special_id(f"<|end_of_{m['role']}|>"))
        on = m["role"] == "assistant"
        mask += [False] + [on] * len(content) + [on]
    return ids, mask


@pytest.fixture(params=["nndataset", "flr"])
def suffix(request):
    return request.param


def test_every_trained_token_is_assistant_content_or_its_end(tmp_path, suffix):
    write_chats(tmp_path / "sft.jsonl", CHATS)
    tok = ByteTokenizer(CHAT_SPECIALS)
    out = tmp_path / f"sft.{suffix}"
    s = build(tmp_path / "sft.jsonl", out, tok, chat=True, created=0)
    assert s.loss_scope == "assistant" and s.documents == len(CHATS)
    got = docs_and_masks(out)
    for (ids, mask), chat in zip(got, CHATS):
        want_ids, want_mask = expected(tok, chat)
        assert ids.tolist() == want_ids
        assert mask.tolist() == want_mask
        answers = [m["content"] + "<|end_of_assistant|>" for m in chat if m["role"] == "assistant"]
        assert tok.decode(ids[mask]) == "".join(answers)
    assert s.loss_tokens == sum(int(m.sum()) for _, m in got)


def test_decoding_the_assistant_spans_of_a_bpe_gives_the_assistant_texts(tmp_path):
    pytest.importorskip("tokenizers")
    write_chats(tmp_path / "sft.jsonl", CHATS * 5)
    bpe = BPETokenizer.train(Input(tmp_path / "sft.jsonl", chat=True), 300, CHAT_SPECIALS)
    out = tmp_path / "sft.flr"
    build(tmp_path / "sft.jsonl", out, bpe, chat=True)
    for (ids, mask), chat in zip(docs_and_masks(out), CHATS * 5):
        # each maximal run of True is one answer and its end token
        edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
        spans = [bpe.decode(ids[a:b]) for a, b in zip(edges[::2], edges[1::2])]
        answers = [m["content"] for m in chat if m["role"] == "assistant"]
        assert spans == [a + "<|end_of_assistant|>" for a in answers]
        assert bpe.decode(ids) == "".join(
            f"<|{m['role']}|>{m['content']}<|end_of_{m['role']}|>" for m in chat
        )


def test_windows_train_only_on_the_assistant_spans(tmp_path, suffix):
    write_chats(tmp_path / "sft.jsonl", CHATS)
    tok = ByteTokenizer(CHAT_SPECIALS)
    out = tmp_path / f"sft.{suffix}"
    build(tmp_path / "sft.jsonl", out, tok, chat=True)
    flow = np.concatenate([ids for ids, _ in docs_and_masks(out)])
    mask = np.concatenate([m for _, m in docs_and_masks(out)])
    w = fl.text.Windows(str(out), 16)
    batch = w.getitems(np.arange(len(w)))
    w.close()
    n = len(flow) - 1  # every token but the first is a target once
    targets, trained = batch["targets"].ravel()[:n], batch["loss_mask"].ravel()[:n]
    assert targets.tolist() == flow[1:].tolist()
    assert trained.tolist() == mask[1:].tolist()
    assert not batch["loss_mask"].ravel()[n:].any()  # the padding


def test_loss_scope_all_trains_on_the_whole_conversation(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1])
    tok = ByteTokenizer(CHAT_SPECIALS)
    s = build(tmp_path / "sft.jsonl", tmp_path / "o.flr", tok, chat=True, loss_scope="all")
    assert s.loss_scope == "all" and s.loss_share == 1.0
    with fl.recfile.open(tmp_path / "o.flr") as f:
        assert "loss_mask" not in f.columns


def test_eos_goes_after_the_conversation_outside_the_loss(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1])
    tok = ByteTokenizer((*CHAT_SPECIALS, "<|endoftext|>"))
    build(tmp_path / "sft.jsonl", tmp_path / "o.flr", tok, chat=True, eos="<|endoftext|>")
    ((ids, mask),) = docs_and_masks(tmp_path / "o.flr")
    want_ids, want_mask = expected(tok, CHATS[0])
    assert ids.tolist() == [*want_ids, tok.special_id("<|endoftext|>")]
    assert mask.tolist() == [*want_mask, False]


def test_another_messages_field_and_a_template_that_trains_two_roles(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1], field="conversation")
    tok = ByteTokenizer(CHAT_SPECIALS)
    template = ChatTemplate(trained=("user", "assistant"))
    inp = Input(tmp_path / "sft.jsonl", chat=True, messages_field="conversation")
    build(inp, tmp_path / "o.flr", tok, chat_template=template)
    ((ids, mask),) = docs_and_masks(tmp_path / "o.flr")
    assert tok.decode(ids[mask]) == (
        "Hi<|end_of_user|>Hello!<|end_of_assistant|>Café?<|end_of_user|>Oui, é.<|end_of_assistant|>"
    )


def test_a_template_function_renders_with_text_the_tokenizer_has(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1])

    def template(messages):
        pieces = []
        for m in messages:
            pieces += [(f"{m['role']}: ", False), (m["content"], m["role"] == "assistant")]
            pieces.append(("\n", False))
        return pieces

    tok = ByteTokenizer()  # no chat specials needed
    build(tmp_path / "sft.jsonl", tmp_path / "o.flr", tok, chat=True, chat_template=template)
    ((ids, mask),) = docs_and_masks(tmp_path / "o.flr")
    assert tok.decode(ids).startswith("system: Be terse.\nuser: Hi\nassistant: Hello!\n")
    assert tok.decode(ids[mask]) == "Hello!Oui, é."


@pytest.mark.parametrize(
    "message, error",
    [
        ({"content": "x"}, r"message 1: expected a 'role' field, found keys \['content'\]"),
        ({"role": "user"}, r"message 1: expected a 'content' field"),
        ({"role": "robot", "content": "x"}, r"message 1: unknown role 'robot' \(the template's"),
        ({"role": "user", "content": None}, r"message 1: 'content' must be a str, found NoneType"),
        ("hello", r"message 1: expected an object, found str"),
    ],
)
@pytest.mark.parametrize("chunk", [7, 1 << 20])
def test_a_bad_message_is_a_format_error_naming_file_line_and_message(
    tmp_path, suffix, message, error, chunk
):
    good = [{"role": "user", "content": "q"}]
    write_chats(tmp_path / "sft.jsonl", [good, good, [good[0], message]])
    out = tmp_path / f"o.{suffix}"
    with pytest.raises(FormatError, match=r"sft\.jsonl: line 3: " + error):
        build(
            tmp_path / "sft.jsonl", out, ByteTokenizer(CHAT_SPECIALS), chat=True, chunk_bytes=chunk
        )
    assert sorted(os.listdir(tmp_path)) == ["sft.jsonl"]


@pytest.mark.parametrize(
    "line, error",
    [
        (
            '{"text": "no messages"}',
            r"line 2: expected a 'messages' list of messages, found no such",
        ),
        ('{"messages": "hi"}', r"line 2: expected a 'messages' list of messages, found str"),
        ("[1]", r"line 2: expected a JSON object with a 'messages' list, found list"),
        ("{oops", r"line 2: expected a JSON object, found invalid JSON"),
    ],
)
def test_a_line_that_is_no_conversation_is_a_format_error(tmp_path, line, error):
    (tmp_path / "sft.jsonl").write_text('{"messages": []}\n' + line + "\n")
    with pytest.raises(FormatError, match=error):
        build(tmp_path / "sft.jsonl", tmp_path / "o.flr", ByteTokenizer(CHAT_SPECIALS), chat=True)
    assert not (tmp_path / "o.flr").exists()


def test_a_tokenizer_without_the_templates_specials_is_refused_before_any_work(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1])
    with pytest.raises(DomainError, match=r"chat_template: .*'<\|system\|>'.*CHAT_SPECIALS"):
        build(tmp_path / "sft.jsonl", tmp_path / "o.flr", ByteTokenizer(), chat=True)


def test_a_failing_template_function_is_a_format_error_naming_the_line(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:2])

    def template(messages):
        if len(messages) < 2:
            raise ValueError("needs two messages")
        return [(m["content"], True) for m in messages]

    with pytest.raises(FormatError, match=r"line 2: the chat template failed: .*needs two"):
        build(
            tmp_path / "sft.jsonl",
            tmp_path / "o.flr",
            ByteTokenizer(),
            chat=True,
            chat_template=template,
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"trained": ("robot",)}, "names roles \\['robot'\\] that are not in roles"),
        ({"begin": "<|x|>"}, "ChatTemplate.begin must be a str holding '{role}'"),
        ({"roles": "user"}, "ChatTemplate.roles must be a sequence of str"),
    ],
)
def test_a_bad_chat_template_is_refused(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ChatTemplate(**kwargs)


def test_chats_and_plain_text_build_one_corpus(tmp_path):
    write_chats(tmp_path / "sft.jsonl", CHATS[:1])
    (tmp_path / "plain.txt").write_text("say <|assistant|>hi<|end_of_assistant|>\nnothing\n")
    tok = ByteTokenizer(CHAT_SPECIALS)
    inputs = [Input(tmp_path / "sft.jsonl", chat=True), tmp_path / "plain.txt"]
    build(inputs, tmp_path / "o.flr", tok, loss_scope="assistant")
    got = docs_and_masks(tmp_path / "o.flr")
    assert (
        tok.decode(got[0][0][got[0][1]]) == "Hello!<|end_of_assistant|>Oui, é.<|end_of_assistant|>"
    )
    # a text document's span is neuralnet.cpp's: both markers in
    assert tok.decode(got[1][0][got[1][1]]) == "<|assistant|>hi<|end_of_assistant|>"
    assert not got[2][1].any()


def test_packed_rows_train_only_on_the_assistant_spans(tmp_path, suffix):
    write_chats(tmp_path / "sft.jsonl", CHATS * 3)
    tok = ByteTokenizer(CHAT_SPECIALS)
    out = tmp_path / f"sft.{suffix}"
    build(tmp_path / "sft.jsonl", out, tok, chat=True)
    packed = fl.text.Packed(str(out), 24, strategy="first_fit")
    rows = packed.getitems(np.arange(len(packed)))
    trained = rows["targets"][rows["loss_mask"]]
    # a document's targets are its tokens but the first, each with the corpus's mask
    want = np.concatenate([ids[1:][m[1:]] for ids, m in docs_and_masks(out)])
    assert sorted(trained.tolist()) == sorted(want.tolist())
    answers = [m["content"] for c in CHATS * 3 for m in c if m["role"] == "assistant"]
    assert len(trained) == sum(len(a.encode()) + 1 for a in answers)
