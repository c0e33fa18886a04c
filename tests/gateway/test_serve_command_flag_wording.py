"""`stepahead serve --config FILE` with a flag that applies only without a config says "set
it" for one flag and "set them" for several (QA221 F8: "set them" for `--policy` alone)."""
from __future__ import annotations

from gateway.cli import main


def test_one_flag_is_it_several_are_them(tmp_path, capsys):
    config = str(tmp_path / "gw.toml")
    assert main(["serve", "--config", config, "--policy", "lru"]) == 2
    assert "--policy applies only without --config; set it in the file's [[models]]" in capsys.readouterr().err
    assert main(["serve", "--config", config, "--policy", "lru", "--workers", "3"]) == 2
    err = capsys.readouterr().err
    assert "apply only without --config; set them in the file's [[models]]" in err
