"""Within a conversion the GGUF file is parsed once and the tensor-name map built once."""
from __future__ import annotations

import gguf
import numpy as np
import pytest

from shards.gguf_read_once import gguf_read_once


@pytest.fixture
def small_gguf(tmp_path):
    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_token_list(["<s>", "a", "b"])
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_file_is_parsed_once_and_the_name_map_built_once_while_active(small_gguf):
    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_read_once():
        first, second = gguf.GGUFReader(small_gguf), gguf.GGUFReader(str(small_gguf))
        assert first is second
        assert [t.name for t in first.tensors] == ["token_embd.weight"]
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.GGUFReader(small_gguf, "r") is not first   # other arguments: another reader
    assert gguf.GGUFReader is original_reader and gguf.get_tensor_name_map is original_map
    assert gguf.GGUFReader(small_gguf) is not gguf.GGUFReader(small_gguf)


def test_the_originals_come_back_when_the_conversion_fails(small_gguf):
    original_reader = gguf.GGUFReader
    with pytest.raises(RuntimeError, match="conversion failed"):
        with gguf_read_once():
            gguf.GGUFReader(small_gguf)
            raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is original_reader
