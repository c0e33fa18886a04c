"""A forecast compiled for the policy's hot path: P(returned by made_at + h), fast.

`Forecast.p_return` interpolates linearly in h between a handful of horizons and stops
at the last one; a log-normal-like return time is much better served by interpolating in
log h, and the mass beyond the last horizon (returns later than every stored point) must
not vanish. `ReturnCurve` merges the forecast's `p_return_within` points with its ETA
quantiles (scaled by P(return)), keeps the running maximum, and closes the curve at
P(return) = 1 - p_end a factor `TAIL_FACTOR` past the last point.

Invariants: `log_h` strictly increasing; `cdf` non-decreasing, within [0, p_ever];
`cdf[-1] == p_ever`. Every query is O(log k) for k points, with no allocation.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from cache.forecast import Forecast

TAIL_FACTOR = 4.0
_TINY = 1e-12


@dataclass(slots=True)
class ReturnCurve:
    made_at_s: float
    log_h: list[float]
    cdf: list[float]
    p_ever: float
    _heights: list[float] = field(default_factory=list, repr=False)
    _segments: list[tuple[float, float]] = field(default_factory=list, repr=False)
    _prefix: list[float] = field(default_factory=list, repr=False)

    @staticmethod
    def from_forecast(forecast: Forecast) -> "ReturnCurve | None":
        """The curve of a forecast; None when it carries no timing at all."""
        p_ever = min(1.0, max(0.0, 1.0 - forecast.p_end))
        points = [(h, p) for h, p in forecast.p_return_within if h > 0.0]
        points += [(s, p_ever * q) for q, s in forecast.eta_quantiles_s if s > 0.0]
        if not points:
            if p_ever <= 0.0:
                return ReturnCurve(forecast.made_at_s, [0.0], [0.0], 0.0)
            return None
        points.sort()
        log_h: list[float] = []
        cdf: list[float] = []
        for h, p in points:
            lh = math.log(h)
            p = min(max(p, cdf[-1] if cdf else 0.0), p_ever)
            if log_h and lh - log_h[-1] < 1e-9:
                cdf[-1] = max(cdf[-1], p)
                continue
            log_h.append(lh)
            cdf.append(p)
        if cdf[-1] < p_ever - 1e-9:
            log_h.append(log_h[-1] + math.log(TAIL_FACTOR))
            cdf.append(p_ever)
        else:
            cdf[-1] = p_ever
        return ReturnCurve(forecast.made_at_s, log_h, cdf, p_ever)

    def p_by(self, h_s: float) -> float:
        """P(returned within `h_s` of `made_at_s`)."""
        if h_s <= 0.0:
            return 0.0
        lh = math.log(h_s)
        log_h = self.log_h
        if lh <= log_h[0]:
            return self.cdf[0] * h_s / math.exp(log_h[0])
        if lh >= log_h[-1]:
            return self.p_ever
        i = bisect.bisect_right(log_h, lh)
        l0 = log_h[i - 1]
        c0 = self.cdf[i - 1]
        return c0 + (self.cdf[i] - c0) * (lh - l0) / (log_h[i] - l0)

    def p_within(self, now_s: float, horizon_s: float) -> float:
        """P(return in (now, now + horizon] | not returned by now)."""
        elapsed = now_s - self.made_at_s
        done = self.p_by(elapsed)
        alive = 1.0 - done
        if alive <= _TINY:
            return 0.0
        return max(0.0, self.p_by(elapsed + horizon_s) - done) / alive

    def hit_density(self, now_s: float, horizon_s: float) -> float:
        """Expected returns per second held, holding until the return or `horizon_s`:
        P(return within the horizon | waiting) / E[min(time to return, horizon) | waiting]
        = (C(e+H) - C(e)) / (H - integral of C over [e, e+H]), exactly for this curve."""
        elapsed = max(0.0, now_s - self.made_at_s)
        end = elapsed + horizon_s
        gained = self.p_by(end) - self.p_by(elapsed)
        if gained <= _TINY:
            return 0.0
        held = horizon_s - self.area(elapsed, end)
        return gained / max(held, _TINY)

    def area(self, lo_s: float, hi_s: float) -> float:
        """The integral of P(returned by h) dh over [lo_s, hi_s] (0 <= lo_s <= hi_s)."""
        return self._area_to(hi_s) - self._area_to(lo_s)

    def _area_to(self, x_s: float) -> float:
        """The integral of P(returned by h) dh over [0, x_s]: before the first point the
        curve is linear (c0 h / h0); on a segment it is a + b ln h, whose integral is
        h (a + b (ln h - 1)); past the last point it is p_ever. O(log k), prefix sums of
        the whole segments are built on first use."""
        prefix = self._prefix
        if not prefix:
            prefix = self._build_prefix()
        heights = self._heights
        if x_s <= heights[0]:
            return self.cdf[0] * x_s * x_s / (2.0 * heights[0])
        if x_s >= heights[-1]:
            return prefix[-1] + self.p_ever * (x_s - heights[-1])
        log_x = math.log(x_s)
        i = bisect.bisect_right(self.log_h, log_x) - 1
        i = max(0, min(i, len(self._segments) - 1))  # NOTE: exp/log round-off at the ends
        slope, base = self._segments[i]
        h0 = heights[i]
        return prefix[i] + x_s * (base + slope * (log_x - 1.0)) - h0 * (base + slope * (self.log_h[i] - 1.0))

    def _build_prefix(self) -> list[float]:
        log_h, cdf = self.log_h, self.cdf
        heights = [math.exp(lh) for lh in log_h]
        segments = []
        prefix = [cdf[0] * heights[0] / 2.0]
        for i in range(len(log_h) - 1):
            slope = (cdf[i + 1] - cdf[i]) / (log_h[i + 1] - log_h[i])
            base = cdf[i] - slope * log_h[i]
            segments.append((slope, base))
            prefix.append(prefix[-1] + heights[i + 1] * (base + slope * (log_h[i + 1] - 1.0))
                          - heights[i] * (base + slope * (log_h[i] - 1.0)))
        self._heights = heights
        self._segments = segments
        self._prefix = prefix
        return prefix
