"""The context chart's refused prompts in /ui (QA167), in headless Chromium: drawn apart,
to the served prompts' scale, every capped bar marked. Split from test_viewer_usability.py
(its store, gateway and connected browser)."""
from __future__ import annotations

import pytest

from tests.agents_trace.browser import chromium_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.test_viewer_usability import driver_fixture, gateway_fixture  # noqa: F401 (fixtures)


def test_a_refused_prompt_is_drawn_apart_and_leaves_the_served_scale(gateway, driver):
    base_url = gateway[0]
    driver.get(f"{base_url}/ui#/session/acme/gamma")
    bars = wait_for(driver, lambda d: d.execute_script(
        "const svg = document.getElementById('context-svg'); if (!svg) return null;"
        "const box = (r) => ({ h: r.getBBox().height, fill: r.getAttribute('fill') });"
        "return { served: [...svg.querySelectorAll('.prompt-bar')].map(box),"
        " refused: [...svg.querySelectorAll('.refused-bar')].map(box),"
        " labels: [...svg.querySelectorAll('.refused-label')].map((t) => t.textContent) }"))
    assert len(bars["served"]) == 1 and len(bars["refused"]) == 1
    assert bars["served"][0]["h"] == pytest.approx(160)   # the served prompt keeps the whole height
    assert bars["refused"][0]["h"] == pytest.approx(160) and bars["refused"][0]["fill"] == "url(#refused-hatch)"
    assert bars["labels"] == ["refused: 100,019 tokens"]


# steps as /v1/traces/sessions/{id}/steps gives them: a served prompt, then refused ones of
# which two were refused before their prompt was counted (0 tokens): past the context (the
# gateway's bound is in its message) and by the tenant's rate
_STEP = {"num_cached_tokens": 0, "num_output_tokens": 0, "error": None, "error_message": None}
_CHART_STEPS = [
    {**_STEP, "index": 0, "num_input_tokens": 7_019, "num_cached_tokens": 7_000, "num_output_tokens": 5},
    {**_STEP, "index": 1, "num_input_tokens": 0, "error": "context_length_exceeded",
     "error_message": "This model's maximum context length is 8192 tokens. However, you requested at least "
                      "15391 tokens (at least 15389 in the messages, 2 in the completion)."},
    {**_STEP, "index": 2, "num_input_tokens": 100_019, "error": "context_length_exceeded"},
    {**_STEP, "index": 3, "num_input_tokens": 250_000, "error": "context_length_exceeded"},
    {**_STEP, "index": 4, "num_input_tokens": 99_999_999, "error": "context_length_exceeded"},
    {**_STEP, "index": 5, "num_input_tokens": 3_000, "error": "context_length_exceeded"},
    {**_STEP, "index": 6, "num_input_tokens": 0, "error": "rate_limit_exceeded"},
]


def test_a_prompt_refused_before_it_was_counted_is_drawn_and_every_capped_bar_is_marked(gateway, driver):
    """QA167 #2 and #4: a context refusal stored with 0 prompt tokens was an invisible bar
    titled "prompt 0 tok"; a capped bar whose mark would overlap the one before had none."""
    base_url = gateway[0]
    if "session/acme/gamma" not in driver.current_url:
        driver.get(f"{base_url}/ui#/session/acme/gamma")
        wait_for(driver, lambda d: d.find_elements("id", "context-svg"))
    chart = driver.execute_script(
        "renderContextChart(arguments[0]); const svg = document.getElementById('context-svg');"
        "const box = (n) => { const b = n.getBBox(); return { x: b.x, y: b.y, w: b.width, h: b.height }; };"
        "return { bars: [...svg.querySelectorAll('rect[class]')].map((r) => ({ ...box(r), cls: r.getAttribute('class'),"
        "  title: r.querySelector('title').textContent })),"
        " caps: svg.querySelectorAll('.refused-cap').length,"
        " labels: [...svg.querySelectorAll('.refused-label')].map((t) => ({ ...box(t), text: t.textContent })) }",
        _CHART_STEPS)
    bars = chart["bars"]
    uncounted = bars[1]   # past the context, size not counted: drawn whole, capped, and said so
    assert uncounted["h"] == pytest.approx(160) and uncounted["h"] == pytest.approx(bars[0]["h"])
    assert "before its prompt was counted" in uncounted["title"] and "at least 15389" in uncounted["title"]
    assert "0 tok" not in uncounted["title"]
    assert [b["cls"] for b in bars] == ["prompt-bar", "refused-bar uncounted"] + ["refused-bar"] * 4 + \
        ["refused-bar uncounted"]
    assert 0 < bars[6]["h"] < 20 and "size unknown" in bars[6]["title"]   # a rate refusal: a short mark
    assert bars[5]["h"] < 160   # smaller than the served prompt: to scale
    # four capped bars side by side (40 px apart): each keeps a mark, none over another
    assert chart["caps"] == 4 and len(chart["labels"]) == 4
    texts = [label["text"] for label in chart["labels"]]
    assert texts[0] in ("refused (not counted)", "not counted") and any("100,019" in t or "100K" in t for t in texts)
    assert any("250" in t for t in texts) and any("99,999,999" in t or "99.9M" in t for t in texts)
    for i, a in enumerate(chart["labels"]):
        for b in chart["labels"][i + 1:]:
            apart = a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"] or \
                a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"]
            assert apart, (a, b)
    # QA218 F6: with no served prompt a refused one is capped as the legend says (no served
    # scale: no top figure), and its Hit cell is "—", not "0%"; F8: Asked for spells a
    # tool named as a control step `tool:END`, as Predicted/Actual do
    alone = driver.execute_script(
        "renderContextChart(arguments[0]); const svg = document.getElementById('context-svg');"
        "return { caps: svg.querySelectorAll('.refused-cap').length,"
        " labels: [...svg.querySelectorAll('.refused-label')].map((t) => t.textContent),"
        " figures: [...svg.querySelectorAll('text:not(.refused-label)')].map((t) => t.textContent),"
        " hits: arguments[0].map(stepHit).concat([stepHit(arguments[1])]),"
        " asked: askedFor({ error: null, tool_calls: [{ name: 'END' }, { name: 'USER' }, { name: 'get' }] }) }",
        [{**_STEP, "index": 0, "num_input_tokens": 45_019, "error": "context_length_exceeded"}],
        {**_STEP, "index": 1, "num_input_tokens": 200, "num_cached_tokens": 0, "num_output_tokens": 3})
    assert alone["caps"] == 1 and alone["labels"] == ["refused: 45,019 tokens"]
    assert "45019" not in alone["figures"]
    assert alone["hits"] == ["—", "0%"]
    assert alone["asked"] == "tool:END, tool:USER, get"
