"""first_confident and FallbackSource: the primary's forecast where it is confident, else
the fallback's where that one is, else the primary's; both sources learn every request."""
from __future__ import annotations

from cache.forecast import Forecast
from cache.forecast_source import FallbackSource, RequestSeen, first_confident


def _forecast(name: str, confident: bool) -> Forecast:
    return Forecast("t", name, 0.0, next_step={"USER": 1.0}, confident=confident)


def test_first_confident_known_answers_and_the_fallback_asked_only_when_needed():
    asked = []

    def fallback(forecast):
        return lambda: asked.append(forecast) or forecast

    sure, unsure = _forecast("primary", True), _forecast("primary", False)
    other_sure, other_unsure = _forecast("fallback", True), _forecast("fallback", False)
    assert first_confident(sure, fallback(other_sure)) is sure and asked == []
    assert first_confident(unsure, fallback(other_sure)) is other_sure
    assert first_confident(unsure, fallback(other_unsure)) is unsure
    assert first_confident(None, fallback(other_sure)) is other_sure
    assert first_confident(None, fallback(None)) is None
    assert first_confident(unsure, fallback(None)) is unsure
    assert len(asked) == 5


class _Recorder:
    """A source whose forecasts name it (`next_step`), confident as told (None: no forecast)."""

    def __init__(self, name: str, confident: bool | None) -> None:
        self.name = name
        self.confident = confident
        self.seen: list[RequestSeen] = []

    def observe(self, request: RequestSeen) -> None:
        self.seen.append(request)

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        if self.confident is None:
            return None
        return Forecast(tenant, session, now_s, next_step={self.name: 1.0}, confident=self.confident)


def test_fallback_source_feeds_both_and_picks_by_confidence():
    for primary_says, fallback_says, expected in ((True, True, "primary"), (False, True, "fallback"),
                                                 (False, False, "primary"), (None, True, "fallback"),
                                                 (None, None, None)):
        primary, fallback = _Recorder("primary", primary_says), _Recorder("fallback", fallback_says)
        source = FallbackSource(primary, fallback)
        request = RequestSeen("t", "s", 1.0, "start")
        source.observe(request)
        assert primary.seen == fallback.seen == [request]
        chosen = source.forecast("t", "s", 2.0)
        assert (None if chosen is None else next(iter(chosen.next_step))) == expected
