"""The Mooncake return analysis: ROC AUC known answers and a hand-made trace."""
import json

import numpy as np
import pytest

from benchmarks.mooncake_returns import analyse, roc_auc


def test_roc_auc_known_answers():
    labels = np.array([True, True, False, False])
    assert roc_auc(labels, np.array([4.0, 3.0, 2.0, 1.0])) == 1.0
    assert roc_auc(labels, np.array([1.0, 2.0, 3.0, 4.0])) == 0.0
    assert roc_auc(labels, np.array([1.0, 1.0, 1.0, 1.0])) == 0.5          # ties count half
    assert roc_auc(labels, np.array([4.0, 1.0, 3.0, 2.0])) == pytest.approx(0.5)


def test_a_hand_made_trace(tmp_path):
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
             {"timestamp": 1000, "input_length": 1024, "output_length": 99, "hash_ids": [0, 2]},
             {"timestamp": 5000, "input_length": 1536, "output_length": 10, "hash_ids": [0, 1, 3]},
             {"timestamp": 9000, "input_length": 2048, "output_length": 10, "hash_ids": [0, 1, 3, 4]}]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = analyse(path)
    # request 2 continues request 0 (after 5 s), request 3 continues request 2 (after 4 s);
    # request 1 shares only the first block, which names nobody
    assert result["continuing_requests"] == 2 and result["continued_requests"] == 2
    assert result["first_return_gap_s"]["p50"] == 4.5
    # continued requests 0 and 2 both wrote 10 tokens; the others 99 and 10: of the four
    # (continued, not) pairs, two lose to 99 and two tie with 10
    assert result["auc_continued"]["output_tokens"] == pytest.approx(0.25)
    # both continued requests wrote 10 tokens: no correlation is defined, none is made up
    assert result["corr_log_gap"]["output_tokens"] is None
    # turns 1, 1, 2, 3: continued have turns 1 and 2, the others 1 and 3; of the four
    # pairs one wins (2 > 1), one ties (1 = 1), two lose (< 3)
    assert result["auc_continued"]["turn"] == pytest.approx(0.375)
