"""The ledger of an extension's new tokens: its shares add up to the whole difference between the two readings, each
token is counted where the extended tokenizer reads it, and a new token the model predicts everywhere is the
dearest."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import byte_level_tokenizer, english_lines, tiny_model

from langswap.errors import ConfigError
from langswap.resources.extension import extend_tokenizer
from langswap.transfer.ledger import new_token_ledger

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def extension():
    lines = english_lines(300)
    source = byte_level_tokenizer(english_lines(), 300)
    extended = extend_tokenizer(source, lines[:200], 30).tokenizer
    return source, extended, lines[200:260]


def _model(extended, seed: int = 0):
    return tiny_model("llama", len(extended), seed=seed)


def test_the_shares_add_up_to_the_whole_difference(extension):
    source, extended, lines = extension
    model = _model(extended)
    ledger = new_token_ledger(model, source, extended, lines, len(source))

    assert len(ledger.saved) == len(extended) - len(source) == 30
    assert ledger.bytes > 0 and ledger.occurrences.sum() > 0
    assert ledger.net.sum() + ledger.unattributed == pytest.approx(ledger.total, rel=1e-6, abs=1e-6)
    # the tokens counted are those the extended tokenizer reads the lines with
    read = np.zeros(30, dtype=np.int64)
    for line in lines:
        for token in extended(line, add_special_tokens=False)["input_ids"]:
            if token >= len(source):
                read[token - len(source)] += 1
    assert np.array_equal(ledger.occurrences, read)
    assert (read == 0).any() and np.all(ledger.saved[read == 0] == 0)  # a token never read saves nothing
    assert ledger.bits_per_byte_change() == pytest.approx(-ledger.total / (np.log(2) * ledger.bytes))


def test_the_total_is_the_difference_of_the_two_readings_whole_line_losses(extension):
    """Checked apart from the chunk arithmetic: every chunk of a byte-level reading is matched, so the ledger's total
    is the source reading's summed token loss less the extended reading's, line by line."""
    source, extended, lines = extension
    model = _model(extended, seed=3)
    ledger = new_token_ledger(model, source, extended, lines, len(source), batch_tokens=64)
    frame = source.bos_token_id if source.bos_token_id is not None else source.eos_token_id

    def line_loss(tokenizer, line: str, columns: int) -> float:
        ids = torch.tensor([[frame] + tokenizer(line, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, :-1, :columns].float()
        return float(-torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None]).sum())

    expected = sum(line_loss(source, line, len(source)) - line_loss(extended, line, len(extended)) for line in lines)
    assert ledger.total == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_a_new_token_the_model_predicts_everywhere_is_the_dearest(extension):
    source, extended, lines = extension
    model = _model(extended)
    loud = len(extended) - 1  # the last new token: give it a logit far above every other at every position
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([[1, 2, 3, 4]]), output_hidden_states=True).hidden_states[-1][0]
        direction = hidden.mean(dim=0)
        model.get_output_embeddings().weight[loud] = 50 * direction / direction.norm() ** 2
    ledger = new_token_ledger(model, source, extended, lines, len(source))

    assert np.argmin(ledger.net) + len(source) == loud
    assert ledger.net[loud - len(source)] < 10 * ledger.net[np.arange(30) != loud - len(source)].min()
    assert ledger.total < 0


def test_bad_arguments_say_what_to_give(extension):
    source, extended, lines = extension
    with pytest.raises(ConfigError, match="the new tokens start at id"):
        new_token_ledger(_model(extended), source, extended, lines, len(extended))
    with pytest.raises(ConfigError, match="no output rows"):
        new_token_ledger(tiny_model("llama", len(source)), source, extended, lines, len(source))
