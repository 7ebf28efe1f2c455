"""``feedline text build`` with several corpora, JSONL, Parquet, chats, --eos/--bos and
--sep (issue 18, parts 3 and 4)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main
from feedline.text import CHAT_SPECIALS, ByteTokenizer, Input, build

EOT = "<|endoftext|>"


def same_file(a, b) -> bool:
    with fl.recfile.open(a) as x, fl.recfile.open(b) as y:
        return set(x.columns) == set(y.columns) and all(
            np.array_equal(np.asarray(x.columns[k].values), np.asarray(y.columns[k].values))
            for k in x.columns
        )


@pytest.fixture
def corpora(tmp_path):
    (tmp_path / "a.txt").write_text("one two\nthree four\n" * 10)
    with open(tmp_path / "b.jsonl", "w") as f:
        for i in range(10):
            f.write(json.dumps({"body": f"json doc {i}"}) + "\n")
    return [tmp_path / "a.txt", tmp_path / "b.jsonl"]


def test_several_corpora_build_into_one_with_a_text_field(corpora, tmp_path, capsys):
    out = tmp_path / "o.flr"
    rc = main(["text", "build", *map(str, corpora), "-o", str(out), "--text-field", "body"])
    assert rc == 0, capsys.readouterr().err
    assert "documents 30 (train 30" in capsys.readouterr().out
    ref = tmp_path / "ref.flr"
    build(corpora, ref, ByteTokenizer(), text_field="body")
    assert same_file(out, ref)


def test_bpe_trains_on_every_corpus_with_the_eos_as_a_special(corpora, tmp_path, capsys):
    pytest.importorskip("tokenizers")
    out, vocab = tmp_path / "o.flr", tmp_path / "v.nnvocab"
    argv = ["text", "build", *map(str, corpora), "-o", str(out), "--text-field", "body"]
    rc = main([*argv, "--tokenizer", "bpe:300", "--eos", EOT, "--vocab", str(vocab)])
    assert rc == 0, capsys.readouterr().err
    tok = fl.text.load_tokenizer(vocab)
    assert tok.specials == {EOT: 0}  # no chat specials: none were asked for
    only_txt = fl.text.BPETokenizer.train(corpora[0], 300, [EOT])
    # learned from the JSONL corpus too
    assert len(tok.encode_batch(["json doc"])[0]) < len(only_txt.encode_batch(["json doc"])[0])
    with fl.recfile.open(out) as f:
        t = f.columns["tokens"]
        assert tok.decode(t.values[: t.offsets[1]]) == "one two" + EOT
        assert tok.decode(t.values[t.offsets[-2] :]) == "json doc 9" + EOT


def test_bpe_for_chats_gets_the_chat_specials(tmp_path, capsys):
    pytest.importorskip("tokenizers")
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "sft.jsonl").write_text((json.dumps({"messages": chat}) + "\n") * 20)
    out, vocab = tmp_path / "o.nndataset", tmp_path / "v.nnvocab"
    rc = main(
        [
            *("text", "build", str(tmp_path / "sft.jsonl"), "-o", str(out), "--chat"),
            *("--tokenizer", "bpe:300", "--vocab", str(vocab)),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert "loss_scope assistant" in capsys.readouterr().out
    tok = fl.text.load_tokenizer(vocab)
    assert list(tok.specials) == list(CHAT_SPECIALS)
    with fl.nndataset.open(out) as ds:
        doc = ds.text_doc("train", 0)
        assert tok.decode(doc.tokens[doc.loss_mask]) == "hello<|end_of_assistant|>"


def test_a_separator_with_escapes_and_ids_for_eos_and_bos(tmp_path, capsys):
    (tmp_path / "code.txt").write_text("def f():\n    pass\n\n\ndef g():\n    pass\n")
    out = tmp_path / "o.flr"
    rc = main(
        [
            *("text", "build", str(tmp_path / "code.txt"), "-o", str(out)),
            *("--sep", r"\n\n\n", "--eos", "257", "--bos", "256"),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    ref = tmp_path / "ref.flr"
    build(Input(tmp_path / "code.txt", sep="\n\n\n"), ref, ByteTokenizer(), eos=257, bos=256)
    assert same_file(out, ref)
    with fl.recfile.open(out) as f:
        assert len(f) == 2


@pytest.mark.parametrize(
    "extra, lines, message",
    [
        (["--eos", "<|nope|>"], ['{"text": "a"}'], "eos='<|nope|>': the byte tokenizer has no"),
        (["--bos", "999"], ['{"text": "a"}'], "bos=999 is outside the tokenizer's vocabulary"),
        ([], ['{"text": "a"}', "not json"], r"c\.jsonl: line 2: expected a JSON object"),
        (["--chat"], ['{"messages": [{"role": "x", "content": "y"}]}'], "unknown role 'x'"),
    ],
)
def test_bad_input_is_one_line_naming_it_and_nothing_is_written(
    tmp_path, capsys, extra, lines, message
):
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    tok = ["--tokenizer", str(tmp_path / "v.nnvocab")] if "--chat" in extra else []
    if tok:
        fl.text.write_vocab(tmp_path / "v.nnvocab", ByteTokenizer(CHAT_SPECIALS))
    out = tmp_path / "o.flr"
    assert main(["text", "build", str(tmp_path / "c.jsonl"), "-o", str(out), *extra, *tok]) == 2
    err = capsys.readouterr().err
    assert err.startswith("feedline text build: ") and err.count("\n") == 1
    assert re.search(message, err), err
    assert not out.exists()
