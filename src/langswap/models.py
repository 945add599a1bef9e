"""Loading models and tokenizers from folders or hub names, with errors that say what to fix.

The objective (causal or masked LM) is read from the config's architectures; a checkpoint without the weights of
its language-model head (a bare encoder or decoder body) is refused. Damaged local files are refused with the file
named: a `*.safetensors` file whose size is not the one its header describes (`check_safetensors`), and a tokenizer
JSON file that is cut short or not a tokenizer. Pickled `.bin` weights are not opened to be checked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer
from transformers import CONFIG_MAPPING, AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError, VocabularyError

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")


def objective_of(config) -> str:
    """'masked' for *ForMaskedLM architectures, 'causal' otherwise."""
    architectures = getattr(config, "architectures", None) or []
    if any(name.endswith("ForMaskedLM") for name in architectures):
        return "masked"
    return "causal"


def quiet_transformers(progress: bool = True) -> None:
    """Only transformers' errors reach the user (its warnings are about defaults langswap sets on purpose), and its
    progress bars only with `progress`."""
    transformers.logging.set_verbosity_error()
    if not progress:
        transformers.utils.logging.disable_progress_bar()


@contextlib.contextmanager
def transformers_bars(progress: bool):
    """transformers' own progress bars (loading and saving weights) only when `progress`; restored after."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    if not progress:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def position_padding_idx(model) -> int | None:
    """The pad token id that RoBERTa-style models number positions after (position ids start at it + 1, so that
    many positions of the table are never used); None for models that number positions from 0."""
    embeddings = getattr(getattr(model, "base_model", None), "embeddings", None)
    if embeddings is None or not hasattr(embeddings, "position_embeddings"):
        return None
    return getattr(embeddings, "padding_idx", None)


def is_tied(model) -> bool:
    """Whether the output layer is the input embedding matrix itself."""
    output = model.get_output_embeddings()
    if output is None:
        return False
    return output.weight is model.get_input_embeddings().weight or (
        output.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr())


def input_embedding_scale(model) -> float:
    """The factor a model's input embedding layer applies to the rows it looks up: Gemma-3's layer multiplies them by
    the square root of the hidden size, so inputs given as `inputs_embeds` (distillation's teacher and student)
    must be multiplied alike to read as `input_ids` do. 1.0 for a plain `nn.Embedding`. Read from the layer's
    `embed_scale` where it has one, else measured on its largest row."""
    embedding = model.get_input_embeddings()
    if type(embedding) is torch.nn.Embedding:
        return 1.0
    scale = getattr(embedding, "embed_scale", None)
    if scale is not None:  # Gemma-3 multiplies by the scale in the weights' dtype (34.0, not 33.94, in bfloat16)
        return float(torch.as_tensor(scale).to(embedding.weight.dtype))
    weight = embedding.weight
    with torch.no_grad():
        row = int(weight[:1024].float().norm(dim=1).argmax())
        looked_up = embedding(torch.tensor([[row]], device=weight.device))[0, 0].float()
        plain = weight[row].float()
        return float(looked_up @ plain / (plain @ plain).clamp_min(1e-30))


def transformers_version() -> tuple[int, int]:
    """(major, minor) of the installed transformers."""
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return major, minor


def dtype_argument(dtype) -> dict:
    """`from_pretrained`'s dtype keyword: `dtype` from transformers 4.56 on, `torch_dtype` before (and still accepted
    by later 4.x releases with a deprecation warning)."""
    return {"dtype": dtype} if transformers_version() >= (4, 56) else {"torch_dtype": dtype}


def lm_load_arguments(dtype, complete: bool = True) -> dict:
    """`from_pretrained` arguments for a causal/masked LM: `dtype_argument`, and before transformers 4.51
    `low_cpu_mem_usage=True` for a checkpoint that holds every weight (`complete`): without it RoBERTa's
    `_tie_weights` replaces the saved `lm_head.bias` by a freshly initialised one, so a transfer would lose the output
    bias. With weights missing it cannot be used there (the missing ones would stay on the meta device)."""
    old = complete and transformers_version() < (4, 51)
    return {**dtype_argument(dtype), **({"low_cpu_mem_usage": True} if old else {})}


def remote_code_refusal(name: str, what: str = "model") -> ConfigError:
    """The error for a model or tokenizer that only loads by running code of its own (`trust_remote_code`)."""
    return ConfigError(
        f"the {what} '{name}' only loads by running Python code that comes with it (config.json's auto_map; "
        "transformers' trust_remote_code), and langswap never runs code from a model folder or the hub. Give a "
        "model of an architecture transformers ships (GPT-2, Llama, Mistral, Qwen2, Gemma, BERT, RoBERTa, ...), or "
        "convert this one into such an architecture first.")


def asks_for_remote_code(error: Exception) -> bool:
    """Whether transformers refused to load something because it would have to run code that comes with it."""
    return "trust_remote_code" in str(error) or "custom code" in str(error)


def _needs_remote_code(folder: Path) -> bool:
    """Whether a local folder's config.json names code of its own for a model type transformers does not know."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # transformers reports a missing or damaged config.json
    if not isinstance(config, dict) or not config.get("auto_map"):
        return False

    return config.get("model_type") not in CONFIG_MAPPING


def load_config(name_or_path: str | Path):
    """A model's config (config.json) from a folder or hub name. A model that needs code of its own
    (`trust_remote_code`) is refused with the reason, its code never imported; transformers is told not to run it,
    so it never asks on a terminal either."""
    quiet_transformers()

    name = str(name_or_path)
    if Path(name).is_dir() and _needs_remote_code(Path(name)):
        raise remote_code_refusal(name)
    try:
        return AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as error:
        if asks_for_remote_code(error):
            raise remote_code_refusal(name) from error
        raise MissingResourceError(
            f"cannot load a model config from '{name}': {str(error).splitlines()[0]} Give a folder written by "
            "save_pretrained (with config.json), or a hub name while online.") from error


def meta_model(config, objective: str):
    """The causal- or masked-LM model class of `config`, built on the meta device (no weights are allocated)."""
    loader = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    with torch.device("meta"):
        return loader.from_config(config)


def stored_spellings(name: str, prefix: str) -> list[str]:
    """The names a parameter may be stored under: its own, and without or with the model's base prefix."""
    if not prefix:
        return [name]
    return [name, name.removeprefix(f"{prefix}."), f"{prefix}.{name}"]


def check_stored_shapes(folder: Path, shapes: dict[str, tuple[str, tuple[int, ...]]], model) -> None:
    """Refuse a stored tensor (`shapes`: stored name -> (file, shape)) whose shape is not the one `model`, built from
    config.json, gives its parameter."""
    prefix = getattr(model, "base_model_prefix", "")
    for name, tensor in model.state_dict().items():
        for spelling in stored_spellings(name, prefix):
            file, shape = shapes.get(spelling, (None, None))
            if shape is not None and tuple(shape) != tuple(tensor.shape):
                raise ResourceFormatError(
                    f"'{folder / file}' stores '{spelling}' with shape {list(shape)}, but config.json makes it "
                    f"{list(tensor.shape)}. The config and the weights are of different models: put the config.json "
                    "that was saved with these weights beside them.")


def _refuse_shape_disagreement(name: str, config, objective: str) -> None:
    """Where a local safetensors folder stores a tensor of another shape than its config.json gives, the
    `check_stored_shapes` error naming it (called when transformers has failed to load the folder)."""
    if not Path(name).is_dir():
        return
    headers = check_safetensors(Path(name))
    shapes = {tensor: (file, tuple(entry["shape"])) for file, (_, header) in headers.items()
              for tensor, entry in header.items() if tensor != "__metadata__"}
    if shapes:
        check_stored_shapes(Path(name), shapes, meta_model(config, objective))


def load_model(name_or_path: str | Path, objective: str | None = None, require_head: bool = True,
               attention: str | None = None):
    """Load a causal- or masked-LM model in the dtype it was saved in.

    A checkpoint that lacks weights the model needs (a bare `BertModel` or `LlamaModel` has no language-model head)
    is refused: transformers would fill them with random values and say nothing at langswap's log level. With
    `require_head=False` (the probes, which read hidden states only) such a model is loaded, with a warning.
    `attention`: transformers' attention implementation (sdpa, eager, ...); None keeps transformers' default."""
    name = str(name_or_path)
    config = load_config(name)  # fails with a clear message before the weights are looked for
    objective = objective or objective_of(config)
    loader = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    if Path(name).is_dir():  # a truncated file otherwise fails in safetensors with no file name ("incomplete metadata")
        check_safetensors(Path(name))
    try:
        model, info = loader.from_pretrained(name, output_loading_info=True, trust_remote_code=False,
                                             **lm_load_arguments("auto", complete=require_head),
                                             **({"attn_implementation": attention} if attention else {}))
    except ValueError as error:  # an architecture without a causal/masked LM class (T5, vision models, ...)
        if "shape" in str(error):  # transformers < 4.51 reports a tensor of another shape this way
            _refuse_shape_disagreement(name, config, objective)
        if attention and "attn" in str(error).lower():
            raise ConfigError(f"'{name}' cannot use attention '{attention}': {str(error).splitlines()[0]} Use "
                              "attention: auto or sdpa.") from error
        raise ConfigError(f"cannot load '{name}' as a {objective} language model: {str(error).splitlines()[0]} "
                          "langswap handles *ForCausalLM (GPT-2, Llama, ...) and *ForMaskedLM (BERT, RoBERTa) "
                          "models.") from error
    except RuntimeError as error:  # transformers' "size mismatch": the report naming the tensor went to its log
        if "mismatch" not in str(error):
            raise
        _refuse_shape_disagreement(name, config, objective)
        raise ResourceFormatError(f"the weights of '{name}' do not have the shapes its config.json gives them "
                                  f"({str(error).splitlines()[0]}). Put the config.json that was saved with these "
                                  "weights beside them.") from error
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        message = missing_weights(name, config, missing, objective)
        if require_head:
            raise ResourceFormatError(message + " " + MISSING_HEAD_FIX)
        logger.warning("%s Hidden states are unaffected.", message)
    model.eval()
    return model


def pick_device(name: str | None = None, key: str = "device"):
    """The torch device `name` names (cpu, cuda, cuda:1, ...); by default cuda where there is one, else cpu. `key`:
    the setting that named it, for the error."""
    if name:
        try:
            device = torch.device(name)
        except RuntimeError as error:
            raise ConfigError(f"{key} '{name}' is not a device torch knows ({error}); give cpu, cuda or cuda:N.") \
                from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"{key} is '{name}' but torch sees no CUDA GPU here; give cpu, or leave {key} unset.")
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"{key} is '{name}' but torch sees {torch.cuda.device_count()} GPU(s) here; give "
                              f"cuda:0 to cuda:{torch.cuda.device_count() - 1}.")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def method_device(value: str):
    """The torch device of a `method_device` setting: cpu, cuda, cuda:N, or auto (cuda where there is one)."""
    return pick_device(None if value == "auto" else value, key="method_device")


MISSING_HEAD_FIX = ("Give a checkpoint with its language-model head (*ForCausalLM or *ForMaskedLM, e.g. saved from "
                    "AutoModelForCausalLM), not a bare encoder or decoder body.")


def missing_weights(name: str, config, missing: list[str], objective: str) -> str:
    """What a checkpoint lacks: its architectures and the first missing weight names."""
    architectures = ", ".join(getattr(config, "architectures", None) or ["no architectures in config.json"])
    return (f"'{name}' ({architectures}) has no weights for {', '.join(missing[:4])}"
            f"{f' and {len(missing) - 4} more' if len(missing) > 4 else ''}: loaded as a {objective} LM these would "
            "be random.")


def load_tokenizer(name_or_path: str | Path, what: str = "tokenizer"):
    """A fast tokenizer from a folder or hub name."""
    quiet_transformers()

    name = str(name_or_path)
    if Path(name).is_dir() and not any((Path(name) / file).is_file() for file in TOKENIZER_FILES):
        # transformers 5 builds an empty tokenizer from config.json alone instead of failing
        raise MissingResourceError(
            f"cannot load the {what} from '{name}': the folder has no tokenizer files ({', '.join(TOKENIZER_FILES)}). "
            "Save the tokenizer into it (tokenizer.save_pretrained(folder)) or give the folder that has it.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, use_fast=True, trust_remote_code=False)
    except Exception as error:  # the tokenizers library raises plain Exception for a tokenizer.json it cannot read
        if asks_for_remote_code(error):
            raise remote_code_refusal(name, what) from error
        damage = damaged_tokenizer_file(name) if Path(name).is_dir() else None
        if damage:
            raise ResourceFormatError(f"cannot load the {what} from '{name}': {damage}") from error
        if not isinstance(error, (OSError, ValueError, TypeError)):
            raise
        raise MissingResourceError(
            f"cannot load the {what} from '{name}': {str(error).splitlines()[0]} Give a folder with tokenizer.json "
            "(a Hugging Face fast tokenizer; `langswap tokenizer` trains one), or a hub name while online.") from error
    if not getattr(tokenizer, "is_fast", False):
        raise VocabularyError(f"the {what} at '{name}' is a slow tokenizer; save it as a fast one (tokenizer.json).")
    return tokenizer


SAFETENSORS_HEADER_LIMIT = 100_000_000  # the safetensors library refuses larger headers


def check_safetensors(folder: Path) -> dict[str, tuple[int, dict]]:
    """Refuse a `*.safetensors` file in `folder` (a whole checkpoint or one shard) whose size is not the size its
    header describes: 8 bytes of header length (little-endian), the JSON header, then the tensor data, which ends at
    the largest `data_offsets` end of the header's tensors. Only the headers are read. `ResourceFormatError` names the
    file, the expected and the actual size. A sharded checkpoint's index (`*.safetensors.index.json`) must parse and
    every shard it lists must be there (`MissingResourceError` names the missing ones). Not detected: damaged bytes
    inside a file of the right size (the format has no checksum). Returns each file's name with its header length
    and parsed header."""
    headers = {}
    for index in sorted(folder.glob("*.safetensors.index.json")):
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise ResourceFormatError(f"'{index}' is not a readable shard index ({error}). Download or copy the "
                                      f"model into '{folder}' again.") from None
        missing = [shard for shard in shards if not (folder / str(shard)).is_file()]
        if missing:
            raise MissingResourceError(
                f"'{folder}' lacks {len(missing)} of the {len(shards)} weight shards its index '{index.name}' lists: "
                f"{', '.join(map(str, missing[:4]))}{' ...' if len(missing) > 4 else ''}. Download or copy the model "
                "again, all of its files.")
    for path in sorted(folder.glob("*.safetensors")):
        size = path.stat().st_size
        fix = (f"An interrupted download or copy leaves such a file; download or copy the model into '{folder}' "
               "again.")
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ResourceFormatError(f"'{path}' is not a complete safetensors file: it has {size:,} bytes, "
                                          f"fewer than the 8 of its header length. {fix}")
            length = struct.unpack("<Q", prefix)[0]
            if length > SAFETENSORS_HEADER_LIMIT:
                raise ResourceFormatError(f"'{path}' has a damaged safetensors header: its header length says "
                                          f"{length:,} bytes, more than safetensors allows. {fix}")
            if 8 + length > size:
                raise ResourceFormatError(f"'{path}' is not a complete safetensors file: it has {size:,} bytes, "
                                          f"fewer than its header alone needs ({8 + length:,}). {fix}")
            try:
                header = json.loads(handle.read(length))
                ends = [int(entry["data_offsets"][1]) for key, entry in header.items() if key != "__metadata__"]
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
                raise ResourceFormatError(f"'{path}' has a damaged safetensors header ({error}). {fix}") from None
        expected = 8 + length + max(ends, default=0)
        if size < expected:
            raise ResourceFormatError(
                f"'{path}' is not a complete safetensors file: it has {size:,} of the {expected:,} bytes its header "
                f"describes ({100 * size / expected:.1f}%). {fix}")
        if size > expected:
            raise ResourceFormatError(
                f"'{path}' is a damaged safetensors file: it has {size:,} bytes, {size - expected:,} more than the "
                f"{expected:,} its header describes. {fix}")
        headers[path.name] = (length, header)
    return headers


TOKENIZER_JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                        "vocab.json")


def damaged_tokenizer_file(folder: str | Path) -> str | None:
    """What is wrong with the first damaged tokenizer JSON file in `folder`, naming it; None where all parse.

    Run after loading failed, so a good tokenizer is read only once: each JSON file must be UTF-8 and valid JSON
    (one that stops in the middle is called truncated), and tokenizer.json must be a tokenizer the tokenizers library
    builds."""
    fix = "Save the tokenizer again (tokenizer.save_pretrained(folder)) or download or copy it again."
    for file in TOKENIZER_JSON_FILES:
        path = Path(folder) / file
        if not path.is_file():
            continue
        data = path.read_bytes()
        if not data.strip():
            return f"'{path}' is empty. {fix}"
        truncated = (f"'{path}' is truncated: its JSON stops in the middle, after {len(data):,} bytes. An interrupted "
                     f"download or copy leaves such a file. {fix}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            if error.reason == "unexpected end of data":  # cut inside a multi-byte character
                return truncated
            return (f"'{path}' is not UTF-8 text (byte 0x{data[error.start]:02x} at position {error.start:,}), so "
                    f"not a JSON file. {fix}")
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            # a cut file fails where it ends (an unterminated string fails where that string starts)
            if error.pos >= len(text.rstrip()) - 1 or error.msg.startswith("Unterminated string"):
                return truncated
            return (f"'{path}' is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}). "
                    f"{fix}")
        if file == "tokenizer.json":
            try:
                Tokenizer.from_str(text)
            except Exception as error:  # the tokenizers library raises plain Exception
                return f"'{path}' is valid JSON but not a tokenizer ({error}). {fix}"
    return None


def save_tokenizer(tokenizer, folder: str | Path) -> None:
    """`tokenizer.save_pretrained(folder)`, in a form every supported transformers version loads alike
    (`portable_tokenizer_config`)."""
    tokenizer.save_pretrained(str(folder))
    portable_tokenizer_config(folder)


def portable_tokenizer_config(folder: str | Path) -> None:
    """Name the generic `PreTrainedTokenizerFast` as the class in `folder/tokenizer_config.json`.

    transformers 5 writes `"tokenizer_class": "TokenizersBackend"`, a class 4.x does not have, and its model-specific
    classes save settings that 4.x's classes of the same name read differently (Llama's `add_bos_token`). The
    generic class takes the tokenization from tokenizer.json alone, which all versions read the same way, and keeps
    the special tokens named in the config. A folder without tokenizer.json is left as it is."""
    folder = Path(folder)
    config_path = folder / "tokenizer_config.json"
    if not config_path.is_file() or not (folder / "tokenizer.json").is_file():
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") != "PreTrainedTokenizerFast":
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def resolve_layers(model_config, layers: tuple[int, ...], option: str = "distill.layers") -> tuple[int, ...]:
    """Layer indices in 1 .. number of blocks of a model with `model_config`, as `DistillConfig.layers` counts
    them; `option` names the setting in errors."""
    blocks = getattr(model_config, "num_hidden_layers", None)
    if blocks is None:
        raise ConfigError(f"the model's config ({type(model_config).__name__}) names no num_hidden_layers; "
                          f"distillation needs it to place {option}.")
    resolved = []
    for layer in layers:
        index = layer + blocks + 1 if layer < 0 else layer
        if not 1 <= index <= blocks:
            raise ConfigError(f"{option} holds {layer}, but this model has {blocks} blocks: give layers from 1 "
                              f"to {blocks}, or from -1 (the last) to -{blocks} (the first).")
        resolved.append(index)
    return tuple(dict.fromkeys(resolved))


def position_limit(model_config) -> int | None:
    """The longest sequence the model's positions allow (None: no limit named)."""
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(model_config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class _Stop(Exception):
    """Raised by a block's forward hook once the deepest wanted state is computed."""


class HiddenStates:
    """A causal body's hidden states at `layers` (indices as `output_hidden_states` counts them, resolved by
    `resolve_layers`), computed only as deep as the deepest of them.

    `reader(**inputs)` (the body's inputs: `inputs_embeds` or `input_ids`, `position_ids`, ...) returns a sequence
    indexed like `output_hidden_states`, holding at least every index of
    `layers` (the last entry is the deepest wanted state). Where the deepest layer is below the last block, forward
    hooks on the blocks keep the wanted outputs and the one on the deepest block stops the forward, so the blocks
    above it cost nothing, forward or backward. transformers' hidden state k, for k below the number of blocks, is
    block k's output; the first call checks that against a whole forward with `output_hidden_states` and reads every
    later batch the whole way (the fallback) where they differ or where no list of the model's blocks is found. The
    last layer is always read the whole way: its state is the final norm's output."""

    def __init__(self, body, layers: tuple[int, ...], blocks: int):
        self.body = body
        self.layers = tuple(layers)
        self.deepest = max(self.layers)
        self.blocks = None
        if self.deepest < blocks:
            found = [module for module in body.modules()
                     if isinstance(module, torch.nn.ModuleList) and len(module) == blocks]
            self.blocks = found[0] if len(found) == 1 else None
        self.checked = False

    @property
    def stops_early(self) -> bool:
        return self.blocks is not None

    def whole(self, **inputs):
        return self.body(**inputs, output_hidden_states=True, use_cache=False).hidden_states

    def __call__(self, **inputs):
        if self.blocks is None:
            return self.whole(**inputs)
        states = self._early(inputs)
        if states is None:
            logger.info("the body's forward did not reach block %d through its list of blocks; every batch is read "
                        "through the whole body", self.deepest)
            self.blocks = None
            return self.whole(**inputs)
        if not self.checked:
            self.checked = True
            with torch.no_grad():
                full = self.whole(**inputs)
            for layer in self.layers:
                got, wanted = states[layer].detach().float(), full[layer].float()
                if got.shape != wanted.shape or not torch.allclose(
                        got, wanted, rtol=1e-3, atol=1e-3 * float(wanted.abs().max()) + 1e-6):
                    logger.info("hidden state %d is not block %d's output in this model; every batch is read "
                                "through the whole body", layer, layer)
                    self.blocks = None
                    return self.whole(**inputs)
        return states

    def _early(self, inputs: dict):
        captured = {}
        wanted = {layer - 1: layer for layer in self.layers}

        def keep(index):
            def hook(module, args, output):
                captured[wanted[index]] = output[0] if isinstance(output, tuple) else output
                if index == self.deepest - 1:
                    raise _Stop

            return hook

        handles = [self.blocks[index].register_forward_hook(keep(index)) for index in wanted]
        try:
            self.body(**inputs, use_cache=False)
        except _Stop:
            pass
        finally:
            for handle in handles:
                handle.remove()
        if len(captured) != len(wanted):
            return None
        states = [None] * (self.deepest + 1)
        for layer, state in captured.items():
            states[layer] = state
        return states
