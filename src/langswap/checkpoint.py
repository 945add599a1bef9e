"""A transfer that reads only the token matrices of a checkpoint and writes the new one tensor by tensor.

`open_checkpoint(folder)` reads the headers of a safetensors checkpoint (one `model.safetensors`, or the shards its
`model.safetensors.index.json` lists) and builds the model class on the meta device (no weights) to learn which
stored tensors are the input embeddings, the output matrix and the output bias, and whether the head is tied. A
tensor can be stored under a name with or without the model's base prefix (`transformer.wte.weight` or
`wte.weight`), and a tied or shared tensor under several names (BERT's `cls.predictions.bias` and
`cls.predictions.decoder.bias`): every stored name of each role is found and every one is rewritten.

`Checkpoint.read_matrices` reads those tensors alone. `Checkpoint.write` writes the target model: one output file
per source file, with the same names; every other tensor's bytes copied unchanged from the source file in blocks of
`BLOCK` bytes, floating-point ones checked for NaN and infinities on the way; the new matrices in the dtype the
source stored them in; the index `from_pretrained` reads; config.json and generation_config.json with the target's
vocabulary size and special tokens. Peak memory is the token matrices plus one block, whatever the size of the body.

A checkpoint in pickle format (`pytorch_model.bin`) is not streamed and never unpickled here: `why_not_streamed`
says so with the command that converts it.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import GenerationConfig

from langswap.errors import ResourceFormatError
from langswap.models import (MISSING_HEAD_FIX, check_safetensors, check_stored_shapes, load_config, meta_model,
                             missing_weights, objective_of, stored_spellings, transformers_version)
from langswap.numerics import SOURCE_FIX, all_finite, refuse_found
from langswap.progress import bar
from langswap.surgery import SourceMatrices, set_vocab_size, source_matrices, update_special_token_ids

logger = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
BLOCK = 64 << 20  # bytes copied at a time (a multiple of every element size)
FLOAT_CODES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
CODE_OF = {dtype: code for code, dtype in FLOAT_CODES.items()}
ROLES = ("embeddings", "output_embeddings", "output_bias")


def convert_command(folder: str | Path, objective: str = "causal") -> str:
    """The command that rewrites a pickle checkpoint in `folder` as safetensors, in place."""
    loader = "AutoModelForMaskedLM" if objective == "masked" else "AutoModelForCausalLM"
    return (f"python -c \"from transformers import {loader} as M; "
            f"M.from_pretrained('{folder}', dtype='auto').save_pretrained('{folder}')\"")


@dataclass(frozen=True)
class Stored:
    """One tensor of a safetensors file: its dtype code, shape and absolute byte range in the file."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


class MissingWeightsError(ResourceFormatError):
    """The checkpoint stores no tensor under any name of some of the model's parameters (a bare body, or names only
    transformers' own loading renames)."""


def why_not_streamed(folder: Path) -> str | None:
    """Why the checkpoint in `folder` cannot be streamed (None when it can): not a local folder, or no safetensors
    weights."""
    if not folder.is_dir():
        return f"'{folder}' is not a local folder (download it first, e.g. `huggingface-cli download NAME`)"
    if (folder / INDEX_FILE).is_file() or (folder / SINGLE_FILE).is_file():
        return None
    pickles = sorted(path.name for path in folder.glob("*.bin"))
    if pickles:
        return (f"'{folder}' holds its weights in pickle format ({', '.join(pickles[:2])}), which is never "
                f"unpickled to be streamed; convert it to safetensors first: {convert_command(folder)}")
    return f"'{folder}' has neither {SINGLE_FILE} nor {INDEX_FILE}"


class Checkpoint:
    """A safetensors checkpoint seen through its headers, with the stored names of its token matrices."""

    def __init__(self, folder: str | Path, model_config=None):
        """`model_config`: the folder's config as `models.load_config` reads it, where the caller has it."""
        self.folder = Path(folder)
        reason = why_not_streamed(self.folder)
        if reason:
            raise ResourceFormatError(f"cannot stream the checkpoint: {reason}.")
        headers = check_safetensors(self.folder)
        index = self.folder / INDEX_FILE
        if index.is_file():
            self.index = json.loads(index.read_text(encoding="utf-8"))
            self.files = sorted(set(self.index["weight_map"].values()))
        else:
            self.index, self.files = None, [SINGLE_FILE]
        self.tensors: dict[str, Stored] = {}
        self.file_metadata: dict[str, dict | None] = {}
        for file in self.files:
            length, header = headers[file]
            self.file_metadata[file] = header.get("__metadata__")
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                if name in self.tensors:
                    raise ResourceFormatError(f"'{self.folder}' stores '{name}' twice ({self.tensors[name].file} "
                                              f"and {file}). Download or copy the model again.")
                start, end = (8 + length + int(offset) for offset in entry["data_offsets"])
                self.tensors[name] = Stored(file, entry["dtype"], tuple(entry["shape"]), start, end)
        self.config = model_config if model_config is not None else load_config(self.folder)
        self.objective = objective_of(self.config)
        self.model = meta_model(self.config, self.objective)
        missing = self._missing()
        if missing:
            raise MissingWeightsError(missing_weights(str(self.folder), self.config, missing, self.objective) + " "
                                      + MISSING_HEAD_FIX)
        check_stored_shapes(self.folder, {name: (stored.file, stored.shape) for name, stored in self.tensors.items()},
                            self.model)
        self.names, self.tied = self._token_tensor_names()

    def stored_bytes(self) -> int:
        """Bytes of every stored tensor (what the checkpoint's files hold beside their headers)."""
        return sum(stored.end - stored.start for stored in self.tensors.values())

    def _spellings(self, name: str) -> list[str]:
        return stored_spellings(name, getattr(self.model, "base_model_prefix", ""))

    def _missing(self) -> list[str]:
        """The model's parameters stored under none of their names (a tied parameter needs one of its names)."""
        names: dict[int, list[str]] = {}
        for name, parameter in self.model.named_parameters(remove_duplicate=False):
            names.setdefault(id(parameter), []).append(name)
        return sorted(spelled[0] for spelled in names.values()
                      if not any(spelling in self.tensors for name in spelled for spelling in self._spellings(name)))

    def _token_tensor_names(self) -> tuple[dict[str, list[str]], bool]:
        """The stored names of each token matrix (ROLES), and whether the head is tied to the input embeddings."""
        model = self.model
        named = list(model.named_parameters(remove_duplicate=False))
        embeddings = model.get_input_embeddings().weight
        output = model.get_output_embeddings()
        tied = output is not None and output.weight is embeddings
        bias = getattr(output, "bias", None) if output is not None else None
        wanted = {"embeddings": embeddings, "output_embeddings": None if output is None or tied else output.weight,
                  "output_bias": bias if isinstance(bias, torch.Tensor) else None}
        names = {}
        for role, parameter in wanted.items():
            if parameter is None:
                names[role] = []
                continue
            found = []
            for name in (name for name, value in named if value is parameter):
                found += [spelling for spelling in self._spellings(name)
                          if spelling in self.tensors and spelling not in found]
            assert found, f"{role} is stored under no name although no parameter is missing"
            shapes = {(self.tensors[name].shape, self.tensors[name].dtype) for name in found}
            if len(shapes) > 1:
                raise ResourceFormatError(f"'{self.folder}' stores its {role.replace('_', ' ')} under "
                                          f"{', '.join(found)} with different shapes or dtypes.")
            names[role] = found
        return names, tied

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the input embeddings are stored in (the new matrices are written in their roles' dtypes)."""
        code = self.tensors[self.names["embeddings"][0]].dtype
        if code not in FLOAT_CODES:
            raise ResourceFormatError(f"'{self.folder}' stores its input embeddings as {code}; a transfer writes "
                                      f"them as one of {', '.join(FLOAT_CODES)}. Give a checkpoint that is not "
                                      "quantised.")
        return FLOAT_CODES[code]

    def _read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A stored tensor, read from its file without mapping it (whose pages would count as resident memory
        beside the copy); converted to `dtype` block by block, so no second copy in the stored dtype is made."""
        stored = self.tensors[name]
        if stored.dtype not in FLOAT_CODES:
            with safe_open(str(self.folder / stored.file), framework="pt") as handle:
                return handle.get_tensor(name).to(dtype) if dtype else handle.get_tensor(name)
        stored_dtype = FLOAT_CODES[stored.dtype]
        out = torch.empty(stored.shape, dtype=dtype or stored_dtype)
        flat = out.reshape(-1)
        element = torch.empty(0, dtype=stored_dtype).element_size()
        step = BLOCK // element
        buffer = torch.empty(step, dtype=stored_dtype) if out.dtype != stored_dtype else None
        with open(self.folder / stored.file, "rb") as handle:
            handle.seek(stored.start)
            for start in range(0, flat.numel(), step):
                target = flat[start:start + step]
                into = target if buffer is None else buffer[:len(target)]
                view = into.view(torch.uint8).numpy()
                if handle.readinto(view) != len(view):
                    raise ResourceFormatError(f"'{self.folder / stored.file}' ended inside tensor '{name}'. "
                                              "Download or copy the model again.")
                if buffer is not None:
                    target.copy_(into)
        return out

    def read_matrices(self, vocabulary_size: int) -> SourceMatrices:
        """The first `vocabulary_size` rows of the token matrices (`surgery.source_matrices`: the matrices in their
        stored dtype, the bias in float32); NaN or infinite values are refused."""
        read = {role: self._read(names[0], torch.float32 if role == "output_bias" else None) if names else None
                for role, names in self.names.items()}
        found = [(self.names[role][0], int((~torch.isfinite(tensor)).sum())) for role, tensor in read.items()
                 if tensor is not None and tensor.numel() and not all_finite(tensor)]
        refuse_found(found, f"source model '{self.folder}'", SOURCE_FIX)
        return source_matrices(read["embeddings"], read["output_embeddings"], read["output_bias"], self.tied,
                               vocabulary_size, stored_dtype=True, copy=False)

    def write(self, folder: Path, tokenizer, embeddings: torch.Tensor, output_embeddings: torch.Tensor | None = None,
              bias: torch.Tensor | None = None, progress: bool = False) -> dict:
        """Write the target model into `folder` (weights, index, config.json, generation_config.json): the source's
        tensors with the new token matrices in their place. Returns what was written (bytes copied and new)."""
        if self.names["output_embeddings"] and output_embeddings is None:
            raise ValueError("the model's head is untied: pass output_embeddings")
        new = {}
        for role, matrix in (("embeddings", embeddings), ("output_embeddings", output_embeddings),
                             ("output_bias", bias)):
            for name in self.names[role]:
                if matrix is None:  # a model with a bias the method gave no rows for keeps none: refuse instead
                    raise ValueError(f"no new {role} for the stored tensor '{name}'")
                new[name] = matrix.detach().to(FLOAT_CODES[self.tensors[name].dtype]).contiguous()
        total = sum(stored.end - stored.start for name, stored in self.tensors.items() if name not in new)
        shown = bar(progress, total >> 20, "copying the body's weights", unit="MiB")
        found: list[tuple[str, int]] = []
        sizes = {}
        try:
            for file in self.files:
                sizes.update(self._write_file(folder / file, file, new, found, shown))
        finally:
            if shown is not None:
                shown.close()
        refuse_found(found, f"source model '{self.folder}'", SOURCE_FIX)
        if self.index is not None:
            weight_map = {name: self.tensors[name].file for name in sorted(self.tensors)}
            index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
            (folder / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        self._write_configs(folder, tokenizer, embeddings.shape[0])
        return {"bytes_copied": total, "bytes_new": sum(tensor.numel() * tensor.element_size()
                                                         for tensor in new.values()), "files": len(self.files)}

    def _write_file(self, path: Path, file: str, new: dict[str, torch.Tensor], found: list, shown) -> dict[str, int]:
        """One output safetensors file: its tensors in the source file's order, new ones in place of the old."""
        names = sorted((name for name, stored in self.tensors.items() if stored.file == file),
                       key=lambda name: self.tensors[name].start)
        header, offset, sizes = {}, 0, {}
        if self.file_metadata.get(file) is not None:
            header["__metadata__"] = self.file_metadata[file]
        for name in names:
            stored, tensor = self.tensors[name], new.get(name)
            shape = stored.shape if tensor is None else tuple(tensor.shape)
            size = stored.end - stored.start if tensor is None else tensor.numel() * tensor.element_size()
            header[name] = {"dtype": stored.dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            sizes[name] = size
            offset += size
        encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
        encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
        buffer = bytearray(BLOCK)
        with open(self.folder / file, "rb") as source, open(path, "wb") as target:
            target.write(len(encoded).to_bytes(8, "little"))
            target.write(encoded)
            for name in names:
                if name in new:
                    target.write(memoryview(new[name].view(torch.uint8).reshape(-1).numpy()))
                    continue
                stored = self.tensors[name]
                dtype = FLOAT_CODES.get(stored.dtype)
                bad = 0
                source.seek(stored.start)
                remaining = stored.end - stored.start
                while remaining:
                    view = memoryview(buffer)[:min(BLOCK, remaining)]
                    count = source.readinto(view)
                    if count != len(view):
                        raise ResourceFormatError(f"'{self.folder / file}' ended inside tensor '{name}'. Download "
                                                  "or copy the model again.")
                    if dtype is not None:
                        values = torch.frombuffer(view, dtype=dtype)
                        if len(values) and not all_finite(values):
                            bad += int((~torch.isfinite(values)).sum())
                    target.write(view)
                    remaining -= count
                    if shown is not None:
                        shown.update((count >> 20))
                if bad:
                    found.append((name, bad))
        return sizes

    def _write_configs(self, folder: Path, tokenizer, rows: int) -> None:
        """config.json and generation_config.json as save_pretrained writes them after `install_embeddings`."""
        model = self.model
        config = copy.deepcopy(self.config)
        model.config = config
        generation = generation_config(self.folder, model)
        model.generation_config = generation
        set_vocab_size(config, rows)
        update_special_token_ids(model, tokenizer)
        config.architectures = [type(model).__name__]
        setattr(config, "dtype" if transformers_version() >= (4, 56) else "torch_dtype", self.dtype)
        config.save_pretrained(str(folder))
        if generation is not None:
            generation.save_pretrained(str(folder))


def generation_config(folder: Path, model):
    """The generation config from_pretrained would give `model`: the folder's generation_config.json, or one made
    from the model config for a model that generates; None for one that does not."""
    can_generate = getattr(model, "can_generate", lambda: False)()
    if not can_generate:
        return None
    if (folder / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(str(folder))
    return GenerationConfig.from_model_config(model.config)


