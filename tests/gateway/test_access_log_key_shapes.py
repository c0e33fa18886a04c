"""The access log redacts what looks like a key wherever it is in the request target (not
only under a credential-like parameter name), keeps parameter names, and does so before
any other filter on uvicorn's access logger (litellm's, when it was imported) sees it."""
import logging

import pytest

from gateway.access_log import ACCESS_LOGGER, REDACTED, QueryRedaction, redact_access_log, redacted_path

KEY = "sk-alice-qa79-SECRET"


@pytest.mark.parametrize("path, expected", [
    (f"/v1/models?k={KEY}", f"/v1/models?k={REDACTED}"),
    (f"/v1/models?{KEY}", f"/v1/models?{REDACTED}"),                       # a bare part: the key is the part
    (f"/v1/models?{KEY}=1&x=1", f"/v1/models?{REDACTED}&x=1"),
    (f"/v1/models?x=Bearer%20{KEY}&limit=2", f"/v1/models?x={REDACTED}&limit=2"),
    ("/v1/models?x=bearer+opaque.token&y=1", f"/v1/models?x={REDACTED}&y=1"),
    (f"/v1/{KEY}/models", f"/v1/{REDACTED}/models"),
    (f"/v1/{KEY.replace('-', '%2D')}/models?limit=2", f"/v1/{REDACTED}/models?limit=2"),   # encoded
    (f"/v1/x%3D{KEY}", f"/v1/{REDACTED}"),
])
def test_values_shaped_like_keys_are_redacted_wherever_they_are(path, expected):
    assert redacted_path(path) == expected
    assert "SECRET" not in redacted_path(path)


@pytest.mark.parametrize("path", [
    "/v1/models?limit=2&after=x", "/v1/tasks-listing-all?q=ask-questions-here", "/v1/models/sk-short",
    "/v1/files/file-abc123?purpose=batch", "/v1/models?q=bearer",
    # QA84: ids and words that merely contain `sk-` or "bearer", names that merely contain "auth" or "token"
    "/v1/traces/sessions/task-sk-12345678", "/v1/traces/sessions?id_contains=task-sk-12345678",
    "/v1/models?tag=build_sk-release01&disk=disk-sk-abcdefgh", "/v1/models?q=bearer+of+news",
    "/v1/traces/sessions?author=me&max_tokens=5&limit=2"])
def test_ordinary_paths_are_kept_as_they_are(path):
    assert redacted_path(path) == path


def test_the_filter_runs_before_a_filter_already_on_the_access_logger():
    logger = logging.getLogger(ACCESS_LOGGER)
    seen = []

    class Earlier(logging.Filter):   # stands for litellm's, installed when an upstream imported it
        def filter(self, record):
            seen.append(record.args[2])
            return True

    earlier = Earlier()
    ours = [f for f in logger.filters if isinstance(f, QueryRedaction)]
    for f in ours:
        logger.removeFilter(f)
    logger.addFilter(earlier)
    try:
        redact_access_log()
        record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                                   ("127.0.0.1:5", "GET", f"/v1/models?k={KEY}", "1.1", 401), None)
        assert logger.filter(record)
        assert seen == [f"/v1/models?k={REDACTED}"]
        assert isinstance(logger.filters[0], QueryRedaction)
    finally:
        logger.removeFilter(earlier)


@pytest.mark.parametrize("name", ["api_key", "apikey", "x-api-key", "access_token", "auth", "client_secret",
                                  "password", "sig", "Authorization"])
def test_parameters_named_as_credentials_are_redacted_by_name(name):
    assert redacted_path(f"/v1/models?{name}=opaque&limit=2") == f"/v1/models?{name}={REDACTED}&limit=2"
