"""A Batch API input file read into its requests, or failed whole with its errors."""
import json

from gateway.batch_lines import MAX_ERRORS, BatchRequest, batch_requests

URL = "/v1/chat/completions"


def _line(custom_id="r1", **changes) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": URL,
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, **changes}


def _file(*lines) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


def test_a_good_file_gives_its_requests_in_order_and_skips_blank_lines():
    requests, errors = batch_requests(_file(_line("a"), "", "  ", _line("b")) + b"\r\n", URL)
    assert errors == [] and [r.custom_id for r in requests] == ["a", "b"]
    assert requests[0] == BatchRequest("a", _line()["body"])


def test_each_bad_line_is_named_and_the_file_gives_no_requests():
    data = _file(_line("a"), "not json", [1], _line(""), _line("a"), _line("c", method="GET"),
                 _line("d", url="/v1/embeddings"), _line("e", body="x"), _line("f", body={"stream": True, "model": "m"}),
                 _line("g", body={"messages": []}), _line("h", body={"background": True, "model": "m"}))
    requests, errors = batch_requests(data, URL)
    assert requests == []
    assert [(e["line"], e["code"], e["param"]) for e in errors] == [
        (2, "invalid_json_line", None), (3, "invalid_json_line", None), (4, "missing_required_parameter", "custom_id"),
        (5, "duplicate_custom_id", "custom_id"), (6, "invalid_method", "method"), (7, "mismatched_endpoint", "url"),
        (8, "missing_required_parameter", "body"), (9, "invalid_value", "body.stream"),
        (10, "missing_required_parameter", "body.model"), (11, "invalid_value", "body.background")]
    assert all(e["message"] for e in errors)


def test_an_empty_file_fails_and_errors_are_capped():
    assert batch_requests(b"\n\n", URL) == ([], [{"code": "empty_file", "message": "The input file holds no requests.",
                                                   "param": None, "line": None}])
    _, errors = batch_requests(b"x\n" * (MAX_ERRORS + 50), URL)
    assert len(errors) == MAX_ERRORS


def test_past_the_listed_errors_the_last_one_says_how_many_more_lines_are_bad():
    """QA212 F1: 5,000 bad lines listed 100 and said nothing of the rest; the file is still
    checked whole, and the 100th error's message counts the bad lines not listed (good lines
    among them are not counted; OpenAI's errors object has no field for it)."""
    data = _file(*["x"] * (MAX_ERRORS + 40), _line("a"), _line("b", method="GET"), *["x"] * 9)
    requests, errors = batch_requests(data, URL)
    assert requests == [] and len(errors) == MAX_ERRORS
    assert [e["line"] for e in errors] == list(range(1, MAX_ERRORS + 1))
    assert errors[-1]["code"] == "invalid_json_line" and errors[-1]["message"].startswith("This line is not valid JSON")
    assert errors[-1]["message"].endswith(f"(Not listed: 50 more bad lines after this one; the first {MAX_ERRORS} "
                                          "are listed.)")
    assert not any("Not listed" in e["message"] for e in errors[:-1])
    _, one_more = batch_requests(b"x\n" * MAX_ERRORS + b"x", URL)
    assert one_more[-1]["message"].endswith("(Not listed: 1 more bad line after this one; the first 100 are listed.)")
    _, exactly = batch_requests(b"x\n" * MAX_ERRORS, URL)   # (the last piece is blank: 100 bad lines)
    assert len(exactly) == MAX_ERRORS and "Not listed" not in exactly[-1]["message"]


def _nested(depth: int) -> object:
    """A value `depth` arrays deep (json_depth counts it `depth`)."""
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_line_past_the_json_checks_of_a_direct_body_is_a_bad_line_not_a_crash():
    """Known answer: a body nested exactly as deep as a direct request may (MAX_JSON_DEPTH)
    passes; one level more, a line nested 100,000 deep (past Python's parser), and a lone
    surrogate anywhere (an escape, or the raw bytes of one) are each `invalid_json_line`."""
    from agents_trace.json_text import MAX_JSON_DEPTH, json_depth

    deepest_ok = _line("ok", body={"model": "m", "x": _nested(MAX_JSON_DEPTH - 1)})
    assert json_depth(deepest_ok["body"]) == MAX_JSON_DEPTH
    requests, errors = batch_requests(_file(deepest_ok), URL)
    assert errors == [] and [r.custom_id for r in requests] == ["ok"]
    too_deep = _line("deep", body={"model": "m", "x": _nested(MAX_JSON_DEPTH)})
    far_too_deep = '{"custom_id": "far", "method": "POST", "url": "%s", "body": {"model": "m", "x": %s%s}}' % (
        URL, "[" * 100_000, "]" * 100_000)
    lone_id = json.dumps(_line("bad\ud800id"))   # json.dumps writes the escape "\ud800"
    lone_body = json.dumps(_line("s", body={"model": "m", "messages": [{"role": "user", "content": "\udfff"}]}))
    raw_surrogate = b'{"custom_id": "raw\xed\xa0\x80", "method": "POST", "url": "%s", "body": {"model": "m"}}' % (
        URL.encode())
    data = _file(deepest_ok, too_deep, far_too_deep, lone_id, lone_body) + b"\n" + raw_surrogate
    requests, errors = batch_requests(data, URL)
    assert requests == []
    assert [(e["line"], e["code"], e["param"]) for e in errors] == [
        (2, "invalid_json_line", None), (3, "invalid_json_line", None), (4, "invalid_json_line", None),
        (5, "invalid_json_line", None), (6, "invalid_json_line", None)]
    assert str(MAX_JSON_DEPTH) in errors[0]["message"] and errors[0]["message"] == errors[1]["message"]
    assert all("surrogate" in e["message"] for e in errors[2:])
    assert json.dumps(errors, ensure_ascii=False).encode()   # every message has a UTF-8 form


def test_a_line_holding_nan_infinity_or_a_number_past_a_float_is_a_bad_line():
    """Not JSON (QA50), as in a direct body (`invalid_json`): each such line is an
    `invalid_json_line` (the file fails whole); a finite float and a big integer are fine."""
    lines = [json.dumps(_line("ok", body={"model": "m", "temperature": 0.5, "seed": 10 ** 30}))]
    for value in ("NaN", "Infinity", "-Infinity", "1e999"):
        lines.append('{"custom_id": "%s", "method": "POST", "url": "%s", "body": {"model": "m", "top_p": %s}}' % (
            value, URL, value))
    requests, errors = batch_requests("\n".join(lines).encode(), URL)
    assert requests == [] and [(e["line"], e["code"]) for e in errors] == [(n, "invalid_json_line") for n in (2, 3, 4, 5)]
    requests, errors = batch_requests(lines[0].encode(), URL)
    assert errors == [] and [r.custom_id for r in requests] == ["ok"]


def test_a_bad_lines_message_says_what_is_wrong_with_its_json():
    """QA90: a line holding NaN was told "This line is not a JSON object."."""
    data = _file('{"custom_id": "a", "body": {"top_p": NaN}}', '{"custom_id": ', "[1]")
    _, errors = batch_requests(data, URL)
    assert [e["message"] for e in errors] == [
        "This line is not valid JSON: 'NaN' is not a JSON value (JSON has no NaN or Infinity).",
        "This line is not valid JSON: Expecting value (column 15).", "This line is not a JSON object."]


def test_a_bare_carriage_return_is_json_whitespace_not_a_line_end():
    """JSON Lines end at "\\n" (and "\\r\\n"); a "\\r" inside a line is whitespace, so the
    line is good and later lines keep their numbers (QA90: split there, line 4 was named 5)."""
    inner = json.dumps(_line("a")).replace(', "method"', ',\r"method"')
    requests, errors = batch_requests(_file(inner, _line("b")) + b"\r\n" + json.dumps(_line("c")).encode()
                                      + b"\r\n" + json.dumps(_line("d", method="GET")).encode(), URL)
    assert requests == [] and [(e["line"], e["code"]) for e in errors] == [(4, "invalid_method")]
    requests, errors = batch_requests(_file(inner, _line("b")) + b"\r\n", URL)
    assert errors == [] and [r.custom_id for r in requests] == ["a", "b"]


def test_a_batch_runs_one_model():
    """As at OpenAI, every line names the first line's model; each other one is named."""
    other = _line("b")
    other["body"] = {**other["body"], "model": "n"}
    requests, errors = batch_requests(_file(_line("a"), other, _line("c")), URL)
    assert requests == [] and [(e["line"], e["code"], e["param"]) for e in errors] == [
        (2, "mismatched_model", "body.model")]
    assert "'n'" in errors[0]["message"] and "'m' (line 1's)" in errors[0]["message"]
    _, errors = batch_requests(_file("not json", other, _line("c")), URL)   # the model is the first good line's
    assert [(e["line"], e["code"]) for e in errors] == [(1, "invalid_json_line"), (3, "mismatched_model")]
    assert "'n' (line 2's)" in errors[1]["message"]


def test_a_model_of_another_type_is_told_as_its_type_not_as_missing():
    """QA231 F2: `"model": 5` failed the batch with "Each request's body needs a 'model'"."""
    data = _file(_line("a"), _line("b", body={"model": 5, "messages": []}), _line("c", body={"model": None}),
                 _line("d", body={"model": ["m"]}), _line("e", body={"messages": []}))
    requests, errors = batch_requests(data, URL)
    assert requests == []
    assert [(e["line"], e["code"], e["param"]) for e in errors] == [
        (2, "invalid_type", "body.model"), (3, "invalid_type", "body.model"), (4, "invalid_type", "body.model"),
        (5, "missing_required_parameter", "body.model")]
    assert errors[0]["message"] == "Invalid type for 'body.model': expected a string, but got an integer instead."
    assert "got null" in errors[1]["message"] and "got an array" in errors[2]["message"]
    assert "needs a 'model'" in errors[3]["message"]
