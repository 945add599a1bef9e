"""Masked-LM masking: BERT's 80/10/10 rule (Devlin et al., 2019), as the Hugging Face MLM data collator does it.

Each position that is not special (and not padding) is selected with probability `probability`; a selected position
becomes the mask token with probability 0.8, a uniformly random token of the vocabulary with probability 0.1, and
keeps its token otherwise; its label is the original token, and unselected positions get the label -100 (ignored by
the loss). The draws come from the `generator` given, or from torch's global random state for None; training
passes a generator seeded per update (`training/trainer.py`), so a resumed run masks as an uninterrupted one.

Not handled: whole-word masking and span masking (every token is selected on its own), and RoBERTa-style dynamic
re-masking beyond drawing anew at each call.
"""

from __future__ import annotations

import torch

from langswap.errors import ConfigError

IGNORE_INDEX = -100  # label of unselected positions; torch's cross-entropy and Hugging Face models skip it
MASK_FRACTION = 0.8  # of the selected positions: the mask token
RANDOM_FRACTION = 0.1  # of the selected positions: a random token; the remaining 0.1 keep their token


def special_tokens_mask(tokenizer, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                        ) -> torch.Tensor:
    """(B, L) bool, True at positions that must never be masked: the tokenizer's special tokens (padding, [CLS],
    [SEP], unknown, ...) and, where an attention mask is given, positions it marks 0.

    input_ids: (B, L) int64; attention_mask: (B, L) or None."""
    special_ids = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=input_ids.dtype, device=input_ids.device)
    special = torch.isin(input_ids, special_ids)
    if attention_mask is not None:
        assert attention_mask.shape == input_ids.shape, (attention_mask.shape, input_ids.shape)
        special |= attention_mask.to(input_ids.device) == 0
    return special


def mask_tokens(input_ids: torch.Tensor, mask_token_id: int, vocab_size: int, special_mask: torch.Tensor,
                probability: float = 0.15, generator: torch.Generator | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of a batch: (masked_input_ids, labels), both (B, L) int64 on input_ids' device.

    input_ids: (B, L) int64 token ids (left unchanged); mask_token_id: the tokenizer's mask token; vocab_size: random
    replacements are drawn from 0 .. vocab_size - 1 (len(tokenizer)); special_mask: (B, L) bool, True where a
    position must never be selected (`special_tokens_mask`); probability: the chance that a position is selected.
    labels hold the original token at selected positions and -100 elsewhere.

    Three draws are made, in this order, each of shape (B, L): uniform numbers that select positions, uniform numbers
    that split the selected ones 80/10/10, and random tokens, on the generator's device (CPU by default) or, for
    generator=None, from the global random state of input_ids' device.
    """
    batch, length = input_ids.shape
    assert special_mask.shape == (batch, length), (special_mask.shape, input_ids.shape)
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
        raise ConfigError(f"masking probability is {probability!r}; it must be a number in (0, 1], e.g. 0.15 as in "
                          "BERT.")
    if vocab_size < 1:
        raise ConfigError(f"vocab_size is {vocab_size!r}; give the tokenizer's vocabulary size, len(tokenizer).")
    draw_device = generator.device if generator is not None else input_ids.device
    shape = (batch, length)
    select = torch.rand(shape, generator=generator, device=draw_device).to(input_ids.device) < probability
    split = torch.rand(shape, generator=generator, device=draw_device).to(input_ids.device)
    random_tokens = torch.randint(vocab_size, shape, generator=generator, device=draw_device,
                                  dtype=input_ids.dtype).to(input_ids.device)
    select &= ~special_mask.to(device=input_ids.device, dtype=torch.bool)
    labels = torch.where(select, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    masked = input_ids.clone()
    masked[select & (split < MASK_FRACTION)] = mask_token_id
    randomised = select & (split >= MASK_FRACTION) & (split < MASK_FRACTION + RANDOM_FRACTION)
    masked[randomised] = random_tokens[randomised]
    return masked, labels
