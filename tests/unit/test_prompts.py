"""The one prompt reader and the one prompt tokenizer (bench, regen, demo and tests use them)."""

import json

import pytest

from dflash_vllm.prompts import chat_ids, prompt_set, read_conversations
from dflash_vllm.config import DFlashConfigError

pytestmark = pytest.mark.unit


def test_reads_text_and_both_jsonl_shapes(tmp_path):
    txt = tmp_path / "p.txt"
    txt.write_text("first line\n\n  two\\nlines \n")
    assert read_conversations(str(txt)) == [[{"role": "user", "content": "first line"}],
                                            [{"role": "user", "content": "  two\nlines "}]]
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]
    js = tmp_path / "p.jsonl"
    js.write_text(json.dumps({"prompt": "hi"}) + "\n" + json.dumps({"messages": chat}) + "\n")
    assert read_conversations(str(js)) == [[{"role": "user", "content": "hi"}], chat]


@pytest.mark.parametrize("name, body, match", [
    ("missing.txt", None, "No such file"),
    ("empty.txt", "\n\n", "holds no prompts"),
    ("bad.jsonl", '{"text": "x"}\n', "not .*messages"),
    ("bad2.jsonl", "not json\n", "JSONDecodeError"),
])
def test_bad_prompt_files_are_one_config_error(tmp_path, name, body, match):
    path = tmp_path / name
    if body is not None:
        path.write_text(body)
    with pytest.raises(DFlashConfigError, match=match):
        read_conversations(str(path))


def test_chat_ids_is_the_chat_template_or_the_joined_turns(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir / "target"))
    msgs = [{"role": "user", "content": "sort 3 1 2"}]
    if tok.chat_template:
        want = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
    else:
        want = tok("sort 3 1 2")["input_ids"]
    assert chat_ids(tok, "sort 3 1 2") == chat_ids(tok, msgs) == [int(x) for x in want]
    name, ids = prompt_set("tasks", tok, 3)
    assert name == "tasks" and len(ids) == 3 and all(isinstance(x, int) for x in ids[0])
    with pytest.raises(DFlashConfigError, match="unknown prompt set"):
        prompt_set("nosuch", tok, 1)


def test_prompts_command_mix_exclude_and_builtin_sets(tmp_path):
    """`dflash-vllm prompts`: a second batch of the mix shares no prompt with the first and is the
    same file every time; built-in held-out sets come out whole."""
    import json

    from dflash_vllm.prompts import FREE, FREE_CHAT
    from dflash_vllm.training.prompt_mix import main

    first, second, again, held = (str(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl", "h.jsonl"))
    main(["--n", "50", "--out", first])
    main(["--n", "40", "--seed", "1", "--exclude", first, "--out", second])
    main(["--n", "40", "--seed", "1", "--exclude", first, "--out", again])
    a = [json.loads(x)["prompt"] for x in open(first)]
    b = [json.loads(x)["prompt"] for x in open(second)]
    assert len(a) == 50 and len(b) == 40 and not set(a) & set(b) and open(second).read() == open(again).read()
    main(["--set", "free,freechat", "--out", held])
    rows = [json.loads(x)["messages"] for x in open(held)]
    assert len(rows) == len(FREE) + len(FREE_CHAT) and rows[0] == [{"role": "user", "content": FREE[0]}]
