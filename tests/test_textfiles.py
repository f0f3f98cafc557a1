"""Files a user names (--gpu-file, --price, --coefficients, a config.json) given a folder,
binary content, a UTF-8 byte-order mark or a huge file: one line naming the file and the
problem, or (a BOM) read as the text it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucap.catalog.gpus import GPU_FILE, read_gpu_file
from gpucap.catalog.models import ModelSpec
from gpucap.catalog.prices import read_prices
from gpucap.physics.coefficients import Coefficients
from gpucap.textfiles import MAX_BYTES

READERS = {
    "GPU file": read_gpu_file,
    "price file": read_prices,
    "coefficients file": Coefficients.from_file,
    "config.json": ModelSpec.from_hf_config,
}


@pytest.mark.parametrize("what", list(READERS))
def test_hostile_files_are_one_line(tmp_path: Path, what: str) -> None:
    read = READERS[what]
    folder = tmp_path / "folder"
    (folder / "config.json").mkdir(parents=True)  # a config.json that is a folder, too
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 64)
    huge = tmp_path / "huge"
    with huge.open("wb") as f:  # sparse: no disk used
        f.truncate(MAX_BYTES + 1)
    for path, says in ((folder, "a folder"), (binary, "not UTF-8 text"), (huge, "bytes, more than")):
        with pytest.raises(ValueError, match=says) as err:
            read(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_byte_order_mark_is_read_as_text(tmp_path: Path) -> None:
    gpus = tmp_path / "gpus.csv"
    gpus.write_bytes(b"\xef\xbb\xbf" + GPU_FILE.read_bytes())
    assert "H100-SXM-80GB" in read_gpu_file(gpus)
    prices = tmp_path / "prices.csv"
    prices.write_bytes(b"\xef\xbb\xbfgpu,usd_per_gpu_hour\nH100-SXM-80GB,2.5\n")
    assert read_prices(prices).per_gpu_hour["H100-SXM-80GB"] == 2.5
    coef = tmp_path / "coef.json"
    coef.write_bytes(b"\xef\xbb\xbf" + json.dumps({"u_compute": 0.4}).encode())
    assert Coefficients.from_file(coef, "vllm").u_compute == 0.4
