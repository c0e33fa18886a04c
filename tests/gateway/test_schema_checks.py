"""SchemaChecker: the same verdicts as jsonschema, remembered per tenant and bounded."""
import pytest
from jsonschema import SchemaError

from gateway import schema_checks
from gateway.schema_checks import SchemaChecker

VALID = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SAME_REORDERED = {"required": ["city"], "properties": {"city": {"type": "string"}}, "type": "object"}


def test_invalid_schemas_raise_every_time_and_are_not_remembered():
    checker = SchemaChecker()
    for _ in range(2):
        with pytest.raises(SchemaError):
            checker.check("acme", {"type": "nope"})
    assert len(checker) == 0


def test_a_pattern_python_cannot_compile_is_a_schema_error_not_a_crash():
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "a{99999999999999999999}"}}}
    with pytest.raises(SchemaError, match="cannot be checked"):
        SchemaChecker().check("acme", schema)


def test_a_passed_schema_is_checked_once_per_tenant(monkeypatch):
    calls = []
    real = schema_checks.validator_for
    monkeypatch.setattr(schema_checks, "validator_for", lambda schema: calls.append(schema) or real(schema))
    checker = SchemaChecker()
    checker.check("acme", VALID)
    checker.check("acme", SAME_REORDERED)   # the same schema in another key order
    assert len(calls) == 1 and len(checker) == 1
    checker.check("globex", VALID)          # another tenant's first use is checked anew
    assert len(calls) == 2 and len(checker) == 2


def test_capacity_drops_the_least_recently_used():
    checker = SchemaChecker(capacity=2)
    schemas = [{"type": "object", "title": f"s{i}"} for i in range(3)]
    checker.check("acme", schemas[0])
    checker.check("acme", schemas[1])
    checker.check("acme", schemas[0])       # s0 is now the most recent
    checker.check("acme", schemas[2])       # drops s1
    assert len(checker) == 2
    keys = [key for _, key in checker._passed]
    assert ['"s1"' in key for key in keys] == [False, False]
