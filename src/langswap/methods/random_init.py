"""`random`: every non-special row drawn per dimension from N(mean, std) of the source rows.

The FullRand baseline and the starting point of TransInner (Minixhofer et al., 2022; de Vries and Nissim, 2021).

Memory: beside the source and new matrices, the mapping (9 bytes a row); the shared finishing step
(`mapping.build_matrix`) draws the random rows a block of about 2 MiB at a time and writes each into the new matrix
in the model's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method


@dataclass(frozen=True, kw_only=True)
class RandomConfig(MethodConfig):
    """Random initialisation with the source embeddings' per-dimension statistics."""


@register_method("random", RandomConfig)
def random_init(inputs: TransferInputs, config: RandomConfig, progress: bool = False) -> TokenMapping:
    """Per-dimension normal with the source embeddings' mean and standard deviation (FullRand)."""
    mapping = TokenMapping.empty(len(inputs.target))
    mapping.set_kind(np.arange(len(mapping)), Kind.RANDOM)
    return mapping
