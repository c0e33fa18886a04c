"""The embedded model's converted copy as saved (shards/model_loader.py): readable by the
other users the umask lets read new files, so a copy converted once can be shared."""
from __future__ import annotations

import os
import stat

import pytest

from shards.model_files import converted_smollm2, model_dir
from shards.model_loader import new_file_mode, save_conversion
from shards.tiny_model import build_tiny_model


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_every_file_of_a_converted_copy_has_the_mode_the_umask_gives_new_files(tmp_path, monkeypatch, umask):
    """safetensors writes model.safetensors 0600 whatever the umask: a copy a platform team
    converted (or one in an image, or on a shared volume) could not be read by other users,
    whose start then called it incomplete and failed converting it again."""
    monkeypatch.setenv("STEPAHEAD_CACHE_DIR", str(tmp_path / "cache"))
    model, tokenizer = build_tiny_model()
    before = os.umask(umask)
    try:
        assert new_file_mode() == 0o666 & ~umask
        target = save_conversion(model, tokenizer)
    finally:
        os.umask(before)
    assert target == model_dir("smollm2")
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in target.iterdir() if path.is_file()}
    assert "model.safetensors" in modes and "tokenizer.json" in modes
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)
    assert converted_smollm2() == target
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]   # no conversion directory left
