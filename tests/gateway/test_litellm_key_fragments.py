"""`redact` also takes out a quote of the beginning of a backend's key (a message cut short,
a provider's masked key), from MIN_SECRET_CHARS characters on; shorter runs, and text that
shares nothing with the key, are left as they are."""
import pytest

from gateway.litellm_errors import MIN_SECRET_CHARS, REDACTED, redact

KEY = "sk-UPSTREAM-qa79-SECRET"


@pytest.mark.parametrize("text, expected", [
    (f"quoted {KEY} whole", f"quoted {REDACTED} whole"),
    ("cut=sk-UPSTREAM-qa here", f"cut={REDACTED} here"),
    ("Incorrect API key provided: sk-UPSTREAM-qa7****CRET.", f"Incorrect API key provided: {REDACTED}****CRET."),
    (f"twice sk-UPSTREAM and {KEY}", f"twice {REDACTED} and {REDACTED}"),
    ("a cut quote sk-UPS…", f"a cut quote {REDACTED}…"),   # at the end of a cut line: shorter is enough
])
def test_a_quote_of_the_keys_beginning_is_redacted(text, expected):
    assert redact(text, [KEY]) == expected


@pytest.mark.parametrize("text", [f"only {KEY[:MIN_SECRET_CHARS - 1]} of it, mid-line", "The server had an error.",
                                  "sk-other-key-entirely", "UPSTREAM-qa79-SECRET without its start"])
def test_text_without_the_keys_first_characters_is_kept(text):
    assert redact(text, [KEY]) == text
