"""Shared fixtures: the tiny offline model, built once per test session."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_loaded():
    from shards.model_loader import load_model

    return load_model("tiny")
