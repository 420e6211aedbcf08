"""SFT JSONL reading: every bad-line kind has its reason and line; loss masks cover exactly the responses."""
import itertools
import json

import pytest

from tatu.data.sft import BadLine, SFTExample, parse_sft_line, read_sft_file
from tatu.model.tokenizer import CharTokenizer

PAIRS = [
    {"prompt": "Qual é a capital de Portugal?", "response": "Lisboa, às margens do Tejo."},
    {"prompt": "Escreva duas linhas:\ncomeço", "response": "primeira linha ção\nsegunda linha ñ é ü"},
    {"prompt": "Conte", "response": "um\n\ndois\n  três"},
]


def _tok(texts):
    return CharTokenizer.train(texts)


@pytest.mark.parametrize(
    "raw, reason_part",
    [
        (b"{not json", "not valid JSON"),
        (b'"just a string"', "expected a JSON object"),
        (b'{"prompt": "oi"}', "missing field 'response'"),
        (b'{"response": "oi"}', "missing field 'prompt'"),
        (b'{"prompt": "", "response": "oi"}', "empty 'prompt'"),
        (b'{"prompt": "oi", "response": "   \\n"}', "empty 'response'"),
        (b'{"prompt": 3, "response": "oi"}', "field 'prompt' is int"),
        (b'{"prompt": "ol\xe1", "response": "oi"}', "not UTF-8"),
        (b"", "empty line"),
        (b'{"messages": []}', "non-empty list"),
        (b'{"messages": [{"role": "user", "content": "oi"}]}', "no 'assistant' message"),
        (b'{"messages": [{"role": "robot", "content": "oi"}]}', "unknown role 'robot'"),
        (b'{"messages": [{"role": "user", "content": "oi"}, {"role": "assistant"}]}',
         "missing field 'content' in messages[1]"),
        (b'{"messages": [{"role": "assistant", "content": "oi"}]}', "no prompt"),
    ],
)
def test_each_bad_kind_names_its_reason(raw, reason_part):
    parsed = parse_sft_line(raw, "f.jsonl", 7)
    assert isinstance(parsed, BadLine)
    assert str(parsed).startswith("f.jsonl:7: ")
    assert reason_part in parsed.reason


def test_good_lines_parse_in_both_forms():
    pair = parse_sft_line('{"prompt": "olá", "response": "tchau"}'.encode(), "f", 1)
    assert isinstance(pair, SFTExample) and (pair.prompt, pair.response) == ("olá", "tchau")
    chat = parse_sft_line(json.dumps({"messages": [{"role": "system", "content": "seja breve"},
                                                   {"role": "user", "content": "oi"},
                                                   {"role": "assistant", "content": "olá"}]}).encode(), "f", 2)
    assert isinstance(chat, SFTExample) and [m["role"] for m in chat.messages] == ["system", "user", "assistant"]


def test_read_sft_file_numbers_lines_and_ignores_only_the_final_newline(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "a", "response": "b"}\r\n\n{"prompt": "c", "response": "d"}\n')
    items = list(read_sft_file(path))
    assert [type(i).__name__ for i in items] == ["SFTExample", "BadLine", "SFTExample"]
    assert [i.line for i in items] == [1, 2, 3]
    assert items[0].response == "b"  # the \r of a CRLF file is not part of the response


@pytest.mark.parametrize("pair", PAIRS)
def test_loss_mask_marks_exactly_the_response_and_eos(pair):
    tok = _tok([p["prompt"] + p["response"] for p in PAIRS])
    example = parse_sft_line(json.dumps(pair, ensure_ascii=False).encode(), "f", 1)
    ids, is_target = example.encode(tok)
    targets = [i for i, t in zip(ids, is_target) if t]
    context = [i for i, t in zip(ids, is_target) if not t]
    # independent expectation, built from the layout BOS <user> prompt <assistant> | response EOS
    assert targets == [tok._char_to_id[c] for c in pair["response"]] + [tok.eos_id]
    assert context == [tok.bos_id, tok.user_id, *[tok._char_to_id[c] for c in pair["prompt"]], tok.assistant_id]
    assert tok.decode(targets) == pair["response"]
    # the targets are one contiguous tail: nothing of the prompt sneaks in after it
    first = is_target.index(True)
    assert all(is_target[first:]) and not any(is_target[:first])


def test_loss_mask_of_messages_covers_every_assistant_turn_only():
    messages = [{"role": "user", "content": "Oi, tudo bem?"}, {"role": "assistant", "content": "Tudo ótimo.\nE você?"},
                {"role": "user", "content": "Também."}, {"role": "assistant", "content": "Que bom!"}]
    tok = _tok([m["content"] for m in messages])
    example = parse_sft_line(json.dumps({"messages": messages}, ensure_ascii=False).encode(), "f", 1)
    ids, is_target = example.encode(tok)
    runs = [[i for i, _ in group] for target, group in itertools.groupby(zip(ids, is_target), key=lambda p: p[1])
            if target]
    assert [tok.decode(r[:-1]) for r in runs] == ["Tudo ótimo.\nE você?", "Que bom!"]
    assert all(r[-1] == tok.eos_id for r in runs)
    assert sum(is_target) == len("Tudo ótimo.\nE você?") + len("Que bom!") + 2


# --- the checkable answer (data/answers.py) ---------------------------------------------------------

@pytest.mark.parametrize(
    "raw, reason_part",
    [
        (b'{"prompt": "oi", "response": "ol\\u00e1", "answer": 42}', "field 'answer' is int, expected a string"),
        (b'{"prompt": "oi", "response": "ol\\u00e1", "answer": null}', "field 'answer' is NoneType"),
        (b'{"prompt": "oi", "response": "ol\\u00e1", "answer": "  "}', "empty once normalised"),
        (b'{"prompt": "oi", "response": "ol\\u00e1", "answer": "\\"...\\""}', "empty once normalised"),
        (b'{"messages": [{"role": "user", "content": "oi"}, {"role": "assistant", "content": "a"}], "answer": "a"}',
         "needs a prompt/response pair"),
    ],
)
def test_a_bad_answer_names_its_line_and_reason(raw, reason_part):
    parsed = parse_sft_line(raw, "held.jsonl", 4)
    assert isinstance(parsed, BadLine), parsed
    assert str(parsed).startswith("held.jsonl:4: ") and reason_part in parsed.reason


def test_an_answer_is_kept_and_a_pair_without_one_has_none():
    marked = parse_sft_line('{"prompt": "2+2?", "response": "quatro", "answer": "Quatro."}'.encode(), "f", 1)
    plain = parse_sft_line('{"prompt": "2+2?", "response": "quatro"}'.encode(), "f", 2)
    assert marked.answer == "Quatro." and plain.answer is None
    # the answer changes nothing of what is trained or scored
    tok = _tok(["2+2?quatroQ."])
    assert marked.encode(tok) == plain.encode(tok) and marked.scored_text == plain.scored_text


def test_answer_items_every_line_or_none(tmp_path):
    from tatu.data.answers import AnswerItem, answer_items

    def items(*answers):
        path = tmp_path / "held.jsonl"
        path.write_text("".join(json.dumps({"prompt": f"p{i}", "response": "r",
                                            **({} if a is None else {"answer": a})}) + "\n"
                                for i, a in enumerate(answers)), encoding="utf-8")
        return answer_items(read_sft_file(path), path), path

    assert items(None, None)[0] == []
    got, _ = items("a", "b")
    assert got == [AnswerItem(1, "p0", "a"), AnswerItem(2, "p1", "b")]
    with pytest.raises(ValueError, match=r"held.jsonl:3: no 'answer' field, while line 1 has one"):
        items("a", "b", None)
    with pytest.raises(ValueError, match=r"held.jsonl:2: an 'answer' field, while line 1 has none"):
        items(None, "b", "c")
