"""From "what comes next" and "how long each step takes" to "when does it come back".

A session waiting after a response returns with its next request. The next step is a
request-bearing step (a tool, `USER`) with probability p1; the request arrives after that
step's gap (durations.py). A *silent* step (`ASSISTANT_TEXT`: a text answer, no request
of its own) is looked through one step: its mass goes to what follows it (p2), measured
from the same response end. `END`, and silence followed by silence or `END`, never return.

Waiting changes the odds: after `elapsed_s` = e without a request, each route r keeps
weight w_r * S_r(e) (S = survival) and "never" keeps its weight, so p_end grows with the
wait. With M(T) = sum_r w_r F_r(T) the mixture CDF at T seconds after the wait began and
Z = w_never + sum_r w_r - M(e):

    P(return within h) = (M(e + h) - M(e)) / Z,
    ETA quantile q     = the T with (M(T) - M(e)) / (sum_r w_r - M(e)) = q, minus e.

M is one matrix-vector product with the tabulated CDFs (`DurationTable`), read at other
times by linear interpolation in log T (grid step 0.115 in log seconds), which keeps a
forecast to a few vector operations.

Invariants of the output (as `Forecast` requires): next_step sums to 1, p_return_within
is non-decreasing and <= 1 - p_end, quantiles non-decreasing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .durations import LOG_GRID_S, DurationTable

NEGLIGIBLE = 1e-12
_LOG0 = float(LOG_GRID_S[0])
_DLOG = float(LOG_GRID_S[1] - LOG_GRID_S[0])


@dataclass(frozen=True, slots=True)
class ReturnForecast:
    next_step: np.ndarray
    p_end: float
    p_return_within: tuple[tuple[float, float], ...]
    eta_quantiles_s: tuple[tuple[float, float], ...]


def route_weights(p1: np.ndarray, p2: np.ndarray | None, end_id: int,
                  silent_id: int | None) -> tuple[np.ndarray, float]:
    """Weight of each symbol as the step whose gap precedes the next request, and the
    weight of never returning."""
    weights = p1.copy()
    w_never = float(p1[end_id])
    if silent_id is not None:
        if p2 is not None:
            weights += p1[silent_id] * p2
            w_never += float(p1[silent_id] * (p2[end_id] + p2[silent_id]))
        else:
            w_never += float(p1[silent_id])
        weights[silent_id] = 0.0
    weights[end_id] = 0.0
    return weights, w_never


def _at(log_t: float, cdf_columns: np.ndarray) -> np.ndarray:
    """Rows of `cdf_columns` (grid-major: one row per grid point) interpolated at
    `log_t`; the grid is uniform, so the index is arithmetic, not a search."""
    pos = (log_t - _LOG0) / _DLOG
    if pos <= 0.0:
        return cdf_columns[0] * 0.0
    i = int(pos)
    if i >= cdf_columns.shape[0] - 1:
        return cdf_columns[-1]
    frac = pos - i
    return cdf_columns[i] * (1.0 - frac) + cdf_columns[i + 1] * frac


@dataclass(frozen=True, slots=True)
class ReturnMixture:
    """The part of a return forecast that does not depend on the time waited: route
    weights, their per-duration-group sums and the mixture CDF M on `LOG_GRID_S`.
    Computed once per (prediction, duration table); `at_zero` is the full forecast for
    elapsed = 0. `request` is 1.0 on symbols whose gap precedes a request, else 0.0."""

    table: DurationTable
    weights: np.ndarray
    request: np.ndarray
    not_request: np.ndarray
    w_never: float
    w_group: np.ndarray
    w_return: float
    mixture: np.ndarray
    at_zero: ReturnForecast


def return_mixture(p1: np.ndarray, p2: np.ndarray | None, end_id: int,
                   silent_id: int | None, table: DurationTable, horizons_s: np.ndarray,
                   quantiles: np.ndarray) -> ReturnMixture:
    """p1: next-step distribution; p2: the one after the silent step (None when there is
    no silent step or it is negligible); table: gap distributions of p1's symbols."""
    weights, w_never = route_weights(p1, p2, end_id, silent_id)
    w_group = weights @ table.membership
    mixture = table.cdf_by_grid @ w_group
    w_return = float(w_group.sum())
    request = (weights > 0.0).astype(np.float64)
    partial = ReturnMixture(table, weights, request, 1.0 - request, w_never, w_group,
                            w_return, mixture, ReturnForecast(p1, 1.0, (), ()))
    at_zero = _forecast(p1, p2, end_id, silent_id, partial, 0.0, horizons_s, quantiles)
    return ReturnMixture(table, weights, request, partial.not_request, w_never, w_group,
                         w_return, mixture, at_zero)


def forecast_returns(p1: np.ndarray, p2: np.ndarray | None, end_id: int,
                     silent_id: int | None, mix: ReturnMixture, elapsed_s: float,
                     horizons_s: np.ndarray, quantiles: np.ndarray) -> ReturnForecast:
    """The return forecast after waiting `elapsed_s` (see the module docstring)."""
    if elapsed_s <= 0.0:
        return mix.at_zero
    return _forecast(p1, p2, end_id, silent_id, mix, elapsed_s, horizons_s, quantiles)


def _forecast(p1: np.ndarray, p2: np.ndarray | None, end_id: int, silent_id: int | None,
              mix: ReturnMixture, elapsed_s: float, horizons_s: np.ndarray,
              quantiles: np.ndarray) -> ReturnForecast:
    e = max(0.0, elapsed_s)
    table, mixture, w_return = mix.table, mix.mixture, mix.w_return
    next_step = p1
    m_e = 0.0
    log_e = -math.inf
    if e > 0.0:
        log_e = math.log(e)
        f_e = _at(log_e, table.cdf_by_grid)
        m_e = float(f_e @ mix.w_group)
        if m_e > 0.0:
            # Survival per symbol, 0 on END / silent; non-request symbols keep factor 1.
            survive = (table.membership @ (1.0 - f_e)) * mix.request
            next_step = p1 * (survive + mix.not_request)
            if silent_id is not None and p2 is not None:
                next_step[silent_id] = p1[silent_id] * (
                    float(p2[end_id] + p2[silent_id]) + float(p2 @ survive))
            next_step = next_step / next_step.sum()
    w_never = mix.w_never
    kept = max(w_return - m_e, 0.0)
    total = w_never + kept
    p_end = w_never / total if total > 0.0 else 1.0
    if kept <= NEGLIGIBLE or total <= 0.0:
        return ReturnForecast(next_step, p_end, tuple((float(h), 0.0) for h in horizons_s), ())

    # M is non-decreasing, so these are too; the clip only absorbs rounding.
    m_h = np.interp(np.log(e + horizons_s), LOG_GRID_S, mixture, left=0.0)
    p_h = np.minimum(np.maximum(m_h - m_e, 0.0) / total, 1.0 - p_end)
    # ETA: invert the mixture CDF after e, starting from the point (log e, M(e)).
    start = max(0, int((log_e - _LOG0) / _DLOG) + 1) if e > 0.0 else 0
    xs, ys = mixture[start:], LOG_GRID_S[start:]
    if e > 0.0:
        xs, ys = np.concatenate(([m_e], xs)), np.concatenate(([log_e], ys))
    if xs.shape[0] < 2:
        return ReturnForecast(next_step, p_end, tuple(zip(horizons_s.tolist(), p_h.tolist())), ())
    log_eta = np.interp(m_e + quantiles * kept, np.maximum.accumulate(xs), ys)
    eta = np.maximum.accumulate(np.maximum(np.exp(log_eta) - e, 0.0))
    return ReturnForecast(next_step, p_end, tuple(zip(horizons_s.tolist(), p_h.tolist())),
                          tuple(zip(quantiles.tolist(), eta.tolist())))
