"""The forecasting side of a `TenantState`: its next-step predictions and return mixtures.

`TenantForecasts` is a part of `agents_trace.predict.tenant.TenantState` (a base class),
kept apart so that each file holds one concept: tenant.py learns and observes, this file
reads what was learned. It uses the tenant's `lock`, `config`, `model`, `memory`, `turns`,
`durations`, `accuracy`, `abandons`, `sessions`, `tool_counts`, `live_tools`,
`horizons_s`, `quantiles`, `_version`, `_tools_version`, `_cold_vocab` and
`_start_template`.

Invariants: every `_locked` method runs with the tenant's `lock` held, and only
`forecast_inputs` takes it; nothing here changes what the tenant learned, only the caches
of what it predicts: a session's prediction, kept until the session advances or the
tenant's `_version` changes; its pending-tool prediction, kept per (`_version`, tool
waits); the cold vocabulary, kept per `_tools_version` (`ColdVocab`); a prediction's
return mixture, kept until the duration table is rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cold_start import NEW_TOOL_COUNT, expand, tool_shares
from .pending_tools import pending_distribution
from .recency import adapt
from .returns import ReturnMixture, return_mixture
from .session import Prediction, SessionState
from .step_model import StepModel, StepState
from .vocabulary import OTHER_TOOL_SYMBOL, Vocabulary, cap_tools

_NEGLIGIBLE_SILENT = 1e-6


@dataclass(frozen=True, slots=True)
class ForecastInputs:
    """A consistent snapshot for one forecast, taken under the tenant lock."""

    prediction: Prediction
    mixture: ReturnMixture
    elapsed_s: float
    confident: bool
    pending_tool: str | None = None


@dataclass(frozen=True, slots=True)
class ColdVocab:
    """A cold tenant's vocabulary and tool shares (cold_start.py) for its tools as of
    `tools_version`; `total`: the counts the shares divide (all tools' and the new
    tool's); `capped`: whether the vocabulary names only the `max_tool_symbols` most
    used tools, the others pooled (then a new tool, used once and the newest, is pooled
    too)."""

    tools_version: int
    vocab: Vocabulary
    shares: np.ndarray
    total: float
    capped: bool


class TenantForecasts:
    """The prediction / forecast side of a `TenantState`."""

    def _cold_vocab_locked(self) -> tuple[Vocabulary, np.ndarray]:
        """The cold vocabulary names the `max_tool_symbols` most used tools; among
        equally used ones the first seen (`tool_counts`' order, then `live_tools`'), so
        a new tool never displaces a known one and costs no rebuild, however it is
        spelled (QA191 N1: names sorting before the known ones rebuilt it per name)."""
        cached = self._cold_vocab
        if cached is None or cached.tools_version != self._tools_version:
            counts = dict(self.tool_counts)
            counts.update((name, 1) for name in self.live_tools if name not in counts)
            order = {name: i for i, name in enumerate(counts)}
            rare = cap_tools(counts, self.config.fit.max_tool_symbols,
                             rank=lambda kv: (-kv[1], order[kv[0]]))
            if rare:   # the rare tools pooled in one symbol, as a fit pools them
                pooled = sum(counts.pop(name) for name in rare)
                counts[OTHER_TOOL_SYMBOL] = counts.get(OTHER_TOOL_SYMBOL, 0) + pooled
            vocab = Vocabulary.from_symbols(counts)
            cached = ColdVocab(self._tools_version, vocab, tool_shares(vocab, counts),
                               sum(counts.values()) + NEW_TOOL_COUNT, bool(rare))
            self._cold_vocab = cached
        return cached.vocab, cached.shares

    def _cold_vocab_added_locked(self, symbol: str, tools_version_before: int) -> None:
        """`symbol`, a new live tool (count 1, the newest), was the only change since
        `tools_version_before`: when the cold vocabulary is capped it pools the new tool,
        so the vocabulary stays the same object (the duration table is not rebuilt) and
        only `OTHER_TOOL_SYMBOL`'s share grows by its count, in O(V) instead of a rebuild
        over every known name (QA188 F2, QA191 N1: one rebuild per new name stalled the
        trace writer)."""
        cached = self._cold_vocab
        if (cached is None or cached.tools_version != tools_version_before
                or not cached.capped):
            return   # rebuilt at the next forecast
        weights = cached.shares * cached.total
        weights[cached.vocab.index[OTHER_TOOL_SYMBOL]] += 1.0
        total = cached.total + 1.0
        self._cold_vocab = ColdVocab(self._tools_version, cached.vocab, weights / total, total,
                                     True)

    def _distribution_locked(self, model: StepModel | None, history: list[str],
                             state_after: StepState | None
                             ) -> tuple[Vocabulary, np.ndarray]:
        """Next-step distribution over the tenant's vocabulary: its own model with
        recency when warm, the expanded global class model when cold, uniform when
        there is no model at all."""
        if self.model is not None and model is self.model and state_after is not None:
            p = model.static_next(state_after)
            if model.recency is not None:
                p = adapt(p, self.memory, model.recency, history, model.vocab)
            return model.vocab, p / p.sum()
        vocab, shares = self._cold_vocab_locked()
        if model is None or state_after is None:
            return vocab, np.full(vocab.size, 1.0 / vocab.size)
        return vocab, expand(model.static_next(state_after), model.vocab, vocab, shares)

    def _predict_locked(self, state: SessionState, global_model: StepModel | None
                        ) -> Prediction:
        """The session's next-step distribution (and the one after a silent step),
        cached in the session until it advances or the tenant's model/memory changes."""
        model = self.model if self.model is not None else global_model
        step_state = state.sync(model)
        cached = state.prediction
        if cached is not None and cached.version == self._version:
            return cached
        vocab, p1 = self._distribution_locked(model, state.history, step_state)
        if model is self.model and state.history and state.history[-1] in self.config.silent_symbols:
            p1 = self._after_answer_locked(p1, vocab.end_id, state.num_answers)
        silent_id = next((vocab.index[s] for s in self.config.silent_symbols
                          if s in vocab.index), None)
        p2 = None
        if silent_id is not None and p1[silent_id] > _NEGLIGIBLE_SILENT:
            silent = vocab.symbols[silent_id]
            after = None if model is None or step_state is None else model.advance(
                step_state, model.encode(silent))
            _, p2 = self._distribution_locked(model, state.history + [silent], after)
        prediction = Prediction(self._version, vocab, p1, p2, silent_id)
        state.prediction = prediction
        return prediction

    def _after_answer_locked(self, p1: np.ndarray, end_id: int, answers: int) -> np.ndarray:
        """`p1` after the session's `answers`-th text answer, with P(END) corrected by
        how many answers the tenant's sessions give (turns.py); the other steps keep
        their proportions."""
        p_model = float(p1[end_id])
        if p_model >= 1.0:
            return p1
        p_end = self.turns.p_end(answers, p_model)
        if p_end == p_model:
            return p1
        adjusted = p1 * ((1.0 - p_end) / (1.0 - p_model))
        adjusted[end_id] = p_end
        return adjusted

    def _current_locked(self, state: SessionState, global_model: StepModel | None
                        ) -> Prediction:
        """What the session does next: the step model's prediction, or, while the tools
        its last response asked for are pending, the first of them unless abandoned."""
        prediction = self._predict_locked(state, global_model)
        if not state.pending:
            return prediction
        key = (self._version, self.abandons.num_waits)
        cached = state.pending_prediction
        if cached is not None and cached[0] == key:
            return cached[1]
        p1 = pending_distribution(prediction.vocab, state.pending[0], self.abandons.p_abandon())
        pending = Prediction(self._version, prediction.vocab, p1, None, None)
        state.pending_prediction = (key, pending)
        return pending

    def _refresh_start_locked(self, global_model: StepModel | None) -> SessionState:
        """The prediction for a session that has not taken a step yet (the same for
        every new session), recomputed only when the tenant's version or model changed;
        learning calls this eagerly so that forecasts for new sessions stay cheap."""
        template = self._start_template
        model = self.model if self.model is not None else global_model
        if template is None or template.model is not model:
            template = SessionState(0.0, 0.0, 0.0)
            self._start_template = template
        self._mixture_locked(self._predict_locked(template, global_model))
        return template

    def _start_state_locked(self, now_s: float, global_model: StepModel | None
                            ) -> SessionState:
        """A not-yet-seen session, waiting since `now_s`."""
        template = self._refresh_start_locked(global_model)
        return SessionState(now_s, now_s, now_s, model=template.model,
                            state=template.state, prediction=template.prediction)

    def forecast_inputs(self, session: str, now_s: float,
                        global_model: StepModel | None) -> ForecastInputs:
        with self.lock:
            state = self.sessions.get(session)
            if state is None:
                state = self._start_state_locked(now_s, global_model)
            prediction = self._current_locked(state, global_model)
            if state.pending:
                # The response named the next step: this rests on the tool's duration and
                # the abandon odds, not on a guess, so the guesses' top-1 does not judge it.
                confident = self.model is not None or (
                    self.abandons.num_waits >= self.config.min_tool_waits)
            else:
                # A guess: trusted while the tenant's recent guesses score well and this
                # session's own last `session_max_misses` guesses did not all miss (one
                # session unlike the others is not hidden by the tenant's average).
                confident = (self.model is not None
                             and state.guesses_trusted(self.config.session_max_misses)
                             and self.accuracy.is_accurate(self.config.min_top1,
                                                           self.config.min_accuracy_weight))
            return ForecastInputs(prediction, self._mixture_locked(prediction),
                                  now_s - state.waiting_since_s, confident,
                                  state.pending[0] if state.pending else None)

    def _mixture_locked(self, prediction: Prediction) -> ReturnMixture:
        """The time-independent part of the return forecast, cached on the prediction
        until the duration table is rebuilt."""
        table = self.durations.table(prediction.vocab.symbols)
        mixture = prediction.mixture
        if mixture is None or mixture.table is not table:
            mixture = return_mixture(prediction.p1, prediction.p2, prediction.vocab.end_id,
                                     prediction.silent_id, table, self.horizons_s,
                                     self.quantiles)
            prediction.mixture = mixture
        return mixture
