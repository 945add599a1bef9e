"""`omp`: orthogonal matching pursuit in a helper model's embedding space (mergekit's tokensurgeon).

Target tokens that the source vocabulary also has (the shared tokens) keep their source rows. Every other target
token's row in a helper model that already uses the target tokenizer (`helper_model`; tokensurgeon calls it the
donor) is approximated as a sparse linear combination of the helper rows of at most `k` shared tokens, chosen
greedily by orthogonal matching pursuit; the same coefficients applied to those tokens' source rows give the new row.
A language model's embedding space is close to linear in what the helper and the source share, so a token the helper
writes as 0.8 `Ġhouse` + 0.3 `s` is written the same way from the source's rows.

Read from tokensurgeon (mergekit, `omp.py` and its CLI): k = 64; the atoms are the helper's raw rows (not
normalised) and each step takes the atom with the largest |inner product| with the residual; the coefficients are
the least-squares fit on the atoms chosen so far; the coefficients are applied to the source rows as they are
(signed, not normalised), so rows are of kind `combined`.
Decided here: shared tokens are matched by canonical form (`langswap.tokens`); a token whose helper row is fitted
to within `tolerance` (relative residual) stops choosing atoms, and its remaining coefficients are dropped instead of
being fitted to noise; the pursuit runs over blocks of target tokens (memory O(block x shared) for the inner
products), with modified Gram-Schmidt applied twice per new atom so the basis stays orthogonal over 64 steps.
As tokensurgeon does, a helper with an untied head gives the head codes of its own (`TokenMapping.head`, from the
helper's head rows), which an untied source head and its bias follow; a tied helper's codes serve every matrix.

Memory: beside the source and new matrices, the helper rows of the M shared tokens (the atoms) in float32, and
transposed in float32 once for the scores: 8 x M x D_h bytes (2 GiB at M = 128,256 with a helper of hidden size
D_h = 2,048, as Llama-3.2-1B); per block, the pursuit's basis and inner products (`BLOCK_VALUES`: 256 MiB of float64
and 128 MiB of float32) and the chosen atoms in float64; and the N new tokens' codes, N x k int64 and float64, held
about four times over while the mapping's rows are made (125 MiB per copy at N = 128,256, k = 64). M + N <= V_t, so
the peak at 128k stays under 3 GiB. A helper with an untied head runs the pursuit again, after the
first, for the head's mapping.

Time: each step scores every block's residuals against all M atoms, 2 k D_h M N floating-point operations in all:
at M = N = 64k and D_h = 4,096 about 2 x 10^15, half a day of one CPU core and a minute or two of a GPU. The pursuit
runs on the transfer's `method_device` (tokensurgeon's `--cuda`); the codes come back to the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.methods.overlap import copied_sources, copy_exact_matches
from langswap.progress import bar as progress_bar

BLOCK_VALUES = 2 ** 25  # float64 values of one block's inner products, and of its basis (256 MiB each)


@dataclass(frozen=True, kw_only=True)
class OmpConfig(MethodConfig):
    """Orthogonal matching pursuit in a helper model's space (mergekit's tokensurgeon)."""

    k: int = field(default=64, metadata={"help": "Shared tokens combined into each new token (tokensurgeon: 64)."})
    tolerance: float = field(default=1e-6, metadata={
        "help": "A token stops choosing shared tokens once its helper row is fitted to within this relative "
                "residual."})

    def __post_init__(self):
        if self.k < 1:
            raise ConfigError(f"method.k is {self.k}; it must be at least 1.")
        if not 0 <= self.tolerance < 1:
            raise ConfigError(f"method.tolerance is {self.tolerance}; give a number in [0, 1).")


def orthogonal_matching_pursuit(targets: torch.Tensor, atoms: torch.Tensor, k: int, tolerance: float = 1e-6,
                                candidates: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse codes of each target row (B, D) over the atom rows (N, D): (atom indices (B, k'), coefficients
    (B, k')), k' = min(k, N, D), float64 inside. Coefficients of steps taken after a row's relative residual fell below
    `tolerance` are 0 (their indices are arbitrary); the others are the least-squares fit on the atoms chosen.
    `candidates`: the atoms transposed in float32 (D, N), made once by a caller that codes several blocks.
    Runs on the device of `atoms` (and `candidates`); the codes are returned on the CPU."""
    rows, dim = targets.shape
    k = min(k, atoms.shape[0], dim)  # dim atoms already fit any target exactly
    device = atoms.device
    y = targets.to(device=device, dtype=torch.float64)
    if candidates is None:
        candidates = atoms.to(torch.float32).T.contiguous()  # (D, N)
    # orthonormal rows spanning the chosen atoms, and chosen atoms = upper^T @ basis
    basis = torch.zeros((rows, k, dim), dtype=torch.float64, device=device)
    upper = torch.zeros((rows, k, k), dtype=torch.float64, device=device)
    chosen = torch.zeros((rows, k), dtype=torch.int64, device=device)
    active = torch.ones((rows, k), dtype=torch.bool, device=device)
    residual = y.clone()
    scale = y.norm(dim=1).clamp_min(1e-300)
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    for step in range(k):
        done |= residual.norm(dim=1) <= tolerance * scale  # once fitted, a row takes no more atoms
        active[:, step] = ~done
        scores = (residual.to(torch.float32) @ candidates).abs_()  # float32 suffices to pick
        if step:
            scores.scatter_(1, chosen[:, :step], -1.0)  # an atom is chosen once
        pick = scores.argmax(dim=1)
        chosen[:, step] = pick
        column = atoms[pick].to(torch.float64)  # (B, D): the chosen atoms alone in float64
        for _ in range(2):  # Gram-Schmidt twice: one pass loses orthogonality over many steps
            if step:
                projection = torch.bmm(basis[:, :step], column[:, :, None])[:, :, 0]  # (B, step)
                upper[:, :step, step] += projection
                column = column - torch.bmm(projection[:, None, :], basis[:, :step])[:, 0]
        length = column.norm(dim=1)
        upper[:, step, step] = length
        basis[:, step] = column / length.clamp_min(1e-300)[:, None]
        # the residual is orthogonal to the earlier basis rows, so only the new one takes its share
        residual = residual - basis[:, step] * (basis[:, step] * residual).sum(dim=1, keepdim=True)
    fitted = torch.bmm(basis, y[:, :, None])[:, :, 0]
    # a dropped step's atom is fitted with coefficient 0: solve on the kept ones only (identity elsewhere)
    keep = active[:, :, None] & active[:, None, :]
    system = torch.where(keep, upper, torch.diag_embed(torch.ones(rows, k, dtype=torch.float64, device=device)))
    right = torch.where(active, fitted, torch.zeros_like(fitted))
    coefficients = torch.linalg.solve_triangular(system, right[:, :, None], upper=True)[:, :, 0]
    return chosen.cpu(), torch.where(active, coefficients, torch.zeros_like(coefficients)).cpu()


@register_method("omp", OmpConfig, requires=("helper_model",))
def omp(inputs: TransferInputs, config: OmpConfig, progress: bool = False) -> TokenMapping:
    """Copy shared tokens; write every other token from them with the sparse code of its helper row (OMP)."""
    helper = inputs.resource("helper_model")
    mapping = sparse_codes(inputs, config, helper.embeddings, progress)
    if helper.output_embeddings is not None:  # the head's own codes, from the helper's head (used where untied)
        mapping.head = sparse_codes(inputs, config, helper.output_embeddings, progress)
    return mapping


def sparse_codes(inputs: TransferInputs, config: OmpConfig, helper: torch.Tensor, progress: bool) -> TokenMapping:
    """The mapping of one matrix: shared tokens copied, the others coded over them in `helper` (V_t, d_h)."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    shared = mapping.rows_of(Kind.COPIED)
    new = np.array([row for row in np.flatnonzero(mapping.kinds == Kind.UNPLACED)
                    if not inputs.target[int(row)].special], dtype=np.int64)
    if len(shared) == 0 or len(new) == 0:
        return mapping
    shared_sources = copied_sources(mapping, shared)
    atoms = helper[torch.from_numpy(shared)].to(inputs.device or "cpu")
    candidates = atoms.to(torch.float32).T.contiguous()  # once for every block
    # a block's inner products (rows x shared) and its basis (rows x dim x k) each stay under BLOCK_VALUES values
    block = max(1, min(BLOCK_VALUES // len(shared), BLOCK_VALUES // (helper.shape[1] * min(config.k, len(shared)))))
    bar = progress_bar(progress, len(new), "omp", "token")
    all_sources, all_weights = [], []
    for start in range(0, len(new), block):
        rows = new[start:start + block]
        indices, coefficients = orthogonal_matching_pursuit(helper[torch.from_numpy(rows)], atoms, config.k,
                                                            config.tolerance, candidates)
        kept = coefficients != 0
        all_sources.append(np.where(kept.numpy(), shared_sources[indices.numpy()], -1))
        all_weights.append(np.where(kept.numpy(), coefficients.numpy(), 0.0))
        if bar is not None:
            bar.update(len(rows))
    if bar is not None:
        bar.close()
    sources, weights = np.concatenate(all_sources), np.concatenate(all_weights)
    placed = (sources >= 0).any(axis=1)  # a zero helper row has no code: the fallback places it
    mapping.set_rows(new[placed], Kind.COMBINED, sources[placed], weights[placed])
    return mapping
