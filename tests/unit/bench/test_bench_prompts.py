"""bench's prompt sets: JSONL, ShareGPT (JSON array), MT-bench question.jsonl; chat template through a real
transformers tokenizer saved to disk; bad files named with their line."""

from __future__ import annotations

import json

import pytest

from sglang_eagle3_ext.bench import prompts as bench_prompts
from sglang_eagle3_ext.boundary import BadInput, Refused
from sglang_eagle3_ext.server.tokenizer import load_tokenizer

TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A real (tiny, word-level) tokenizer with a chat template, saved the way HF models ship one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<user>", "<assistant>", "<system>", "hello", "world", "be", "brief", "why", "sky", "blue", "?"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>")
    fast.chat_template = TEMPLATE
    d = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(d)
    return str(d)


def _tokenizer(name):
    """The loader the bench command line passes: the tokenizer of --target NAME."""
    return lambda: load_tokenizer(name, False, "--target")


def _write(p, recs, array=False):
    p.write_text(json.dumps(recs) if array else "\n".join(json.dumps(r) for r in recs) + "\n")
    return str(p)


def test_shapes_are_recognised(tmp_path):
    recs = [
        {"input_ids": [1, 2]},
        {"prompt": "hi"},
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {
            "conversations": [
                {"from": "system", "value": "s"},
                {"from": "human", "value": "q"},
                {"from": "gpt", "value": "r"},
                {"from": "human", "value": "q2"},
            ]
        },
        {"question_id": 81, "category": "writing", "turns": ["t1", "t2"]},
    ]
    got = [bench_prompts.parse_record("x", r) for r in recs]
    assert got[0] == {"input_ids": [1, 2]} and got[1] == {"text": "hi"}
    assert got[2] == {"messages": [{"role": "user", "content": "a"}]}  # the reply is what the model writes
    assert got[3] == {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}
    assert got[4] == {"messages": [{"role": "user", "content": "t1"}]}


def test_sharegpt_array_through_chat_template(tmp_path, tokenizer_dir):
    path = _write(
        tmp_path / "sg.json",
        [
            {
                "id": "a",
                "conversations": [{"from": "human", "value": "why sky blue ?"}, {"from": "gpt", "value": "hello"}],
            }
        ],
        array=True,
    )
    ps = bench_prompts.from_file(path, None, _tokenizer(tokenizer_dir))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    want = tok("<user> why sky blue ? <assistant>")["input_ids"]
    assert ps.prompts == [{"input_ids": want}] and want == [1, 8, 9, 10, 11, 2]
    assert "chat template" in ps.notes[0]


def test_text_without_tokenizer_is_sent_as_text_chat_is_refused(tmp_path):
    path = _write(tmp_path / "t.jsonl", [{"prompt": "be brief"}, {"text": "hello"}])
    assert bench_prompts.from_file(path, None, None).prompts == [{"text": "be brief"}, {"text": "hello"}]
    path = _write(tmp_path / "q.jsonl", [{"text": "hello"}, {"question_id": 1, "turns": ["be brief", "more"]}])
    with pytest.raises(BadInput, match=r"q.jsonl:2: chat prompts need the chat template .*pass --target DIR"):
        bench_prompts.from_file(path, None, None)


def test_limit_and_ids_need_no_tokenizer(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"input_ids": [i, i + 1]} for i in range(5)])
    assert len(bench_prompts.from_file(path, 3, _tokenizer("/nonexistent/never/loaded")).prompts) == 3


@pytest.mark.parametrize(
    "content,where",
    [
        ('{"input_ids": [1,2]}\nnot json\n', "p.jsonl:2: not JSON"),
        ('{"foo": 1}\n', "p.jsonl:1: needs 'input_ids'"),
        ('{"input_ids": [-1]}\n', r"p.jsonl:1: 'input_ids'\[0\]: must be >= 0"),
        ('{"input_ids": [1, true]}\n', r"p.jsonl:1: 'input_ids'\[1\]: expected"),
        (
            '{"messages": [{"role": "user", "content": 5}]}\n',
            r"p.jsonl:1: 'messages'\[0\]: 'content': expected a string",
        ),
        ('{"conversations": ["hi"]}\n', r"p.jsonl:1: 'conversations'\[0\]: expected"),
        ('{"turns": [3]}\n', r"p.jsonl:1: 'turns'\[0\]: expected a string"),
        ('{"text": ""}\n', r"p.jsonl:1: 'text': must not be empty"),
        ('[{"text": "a"}, 3]', r"p.jsonl\[1\]: expected an object"),
        ('{"a": 1}', r"p.jsonl \(prompt file\): expected a list|needs 'input_ids'"),
        ("", "no prompts in the file"),
    ],
)
def test_bad_files_named(tmp_path, content, where):
    p = tmp_path / "p.jsonl"
    p.write_text(content)
    with pytest.raises(BadInput, match=where):
        bench_prompts.from_file(str(p), None, None)


def test_missing_file_and_bad_tokenizer(tmp_path):
    with pytest.raises(BadInput, match="--prompts .*nope.jsonl: prompt file not found"):
        bench_prompts.from_file(str(tmp_path / "nope.jsonl"), None, None)
    p = _write(tmp_path / "t.jsonl", [{"text": "x"}])
    with pytest.raises(Refused, match="--target .*: cannot load its tokenizer"):
        bench_prompts.from_file(p, None, _tokenizer(str(tmp_path / "no_model")))


def test_a_huge_array_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_prompts, "MAX_ARRAY_FILE", 100)
    p = _write(tmp_path / "sg.json", [{"text": "hello world"}] * 20, array=True)
    with pytest.raises(BadInput, match=r"--prompts .*sg.json: prompt file is larger than 100 bytes"):
        bench_prompts.from_file(p, 1, None)
    assert len(bench_prompts.from_file(_write(tmp_path / "p.jsonl", [{"text": "a"}] * 50), 2, None).prompts) == 2
