"""BERT masking: the 80/10/10 statistics, specials and padding never selected, determinism, resumable global RNG."""

from __future__ import annotations

import pytest
import torch

from langswap.errors import ConfigError
from langswap.masking import IGNORE_INDEX, mask_tokens, special_tokens_mask

from conftest import TOKENIZER_BUILDERS, english_lines

VOCAB, MASK_ID = 1000, 4  # ids 0-4 play the special tokens


def random_batch(seed: int = 0, batch: int = 64, length: int = 512):
    """(input_ids, special): ordinary ids 5..999; the first column, a random tenth and a padded tail are special."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (batch, length), generator=generator)
    special = torch.rand((batch, length), generator=generator) < 0.1
    special[:, 0] = True
    for row in range(0, batch, 3):  # padding at the end of every third row
        special[row, length // 2:] = True
        input_ids[row, length // 2:] = 0
    return input_ids, special


def test_mask_statistics_follow_bert():
    input_ids, special = random_batch()
    masked, labels = mask_tokens(input_ids, MASK_ID, VOCAB, special, generator=torch.Generator().manual_seed(1))
    selected = labels != IGNORE_INDEX
    candidates = int((~special).sum())  # about 22,000 positions
    assert int(selected.sum()) / candidates == pytest.approx(0.15, abs=0.01)
    n_selected = int(selected.sum())  # about 3,300: one standard deviation of a fraction 0.1 is 0.005
    to_mask = int((masked[selected] == MASK_ID).sum()) / n_selected
    kept = int((masked[selected] == input_ids[selected]).sum()) / n_selected  # a random draw of the same id counts
    assert to_mask == pytest.approx(0.8, abs=0.025)
    assert kept == pytest.approx(0.1, abs=0.02)
    assert 1 - to_mask - kept == pytest.approx(0.1, abs=0.02)  # random tokens
    assert torch.equal(labels[selected], input_ids[selected])
    assert torch.equal(masked[~selected], input_ids[~selected])  # unselected positions are untouched
    assert int(masked.min()) >= 0 and int(masked.max()) < VOCAB


def test_specials_and_padding_are_never_selected():
    input_ids, special = random_batch(seed=2)
    masked, labels = mask_tokens(input_ids, MASK_ID, VOCAB, special, probability=1.0,
                                 generator=torch.Generator().manual_seed(0))
    assert (labels[special] == IGNORE_INDEX).all() and torch.equal(masked[special], input_ids[special])
    assert (labels[~special] != IGNORE_INDEX).all()  # probability 1 selects every other position


def test_same_seed_same_masks_and_the_global_state_resumes():
    input_ids, special = random_batch(seed=3, batch=8, length=64)
    first = mask_tokens(input_ids, MASK_ID, VOCAB, special, generator=torch.Generator().manual_seed(5))
    again = mask_tokens(input_ids, MASK_ID, VOCAB, special, generator=torch.Generator().manual_seed(5))
    other = mask_tokens(input_ids, MASK_ID, VOCAB, special, generator=torch.Generator().manual_seed(6))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[1], other[1])
    # generator=None draws from the global state, which the Trainer saves and restores with its checkpoints
    state = torch.get_rng_state()
    from_global = mask_tokens(input_ids, MASK_ID, VOCAB, special)
    torch.set_rng_state(state)
    resumed = mask_tokens(input_ids, MASK_ID, VOCAB, special)
    assert torch.equal(from_global[0], resumed[0]) and torch.equal(from_global[1], resumed[1])
    # a seeded generator leaves the global state alone
    state = torch.get_rng_state()
    mask_tokens(input_ids, MASK_ID, VOCAB, special, generator=torch.Generator().manual_seed(5))
    assert torch.equal(torch.get_rng_state(), state)


def test_special_tokens_mask_marks_specials_and_padding():
    tokenizer = TOKENIZER_BUILDERS["wordpiece"](english_lines(200), vocab_size=300)
    batch = tokenizer(["the house", "the old house by the river"], padding=True, return_tensors="pt")
    special = special_tokens_mask(tokenizer, batch["input_ids"], batch["attention_mask"])
    ids = batch["input_ids"]
    expected = ((ids == tokenizer.cls_token_id) | (ids == tokenizer.sep_token_id) | (ids == tokenizer.pad_token_id))
    assert torch.equal(special, expected)
    assert special[0, -1] and not special[0, 1]  # a pad at the end of the short line; "the" is ordinary


@pytest.mark.parametrize("probability", [0, -0.1, 1.5, True])
def test_bad_probability_is_a_config_error(probability):
    input_ids, special = random_batch(batch=2, length=8)
    with pytest.raises(ConfigError, match="probability"):
        mask_tokens(input_ids, MASK_ID, VOCAB, special, probability=probability)
