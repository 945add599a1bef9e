"""Every run trains or stops loudly: no silent NaN in training, transfer, evaluation or bench.

The deep model below reproduces what SmolLM2-135M's shape with random weights did on every device and precision:
pad = end-of-text, so transformers zeroes that row at initialisation and `padding_idx` freezes it; packing puts
end-of-text at the start of some blocks; the zero hidden state at position 0 makes every RMS norm's gradient divide
by sqrt(eps), which overflows over 20 layers, and NaN spreads to every gradient.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model, unwrapped
from langswap.errors import NumericalError, TrainingDivergedError
from langswap.numerics import non_finite_parameters, prepare_embeddings_for_training
from langswap.training.run import TrainConfig, train


def deep_llama(tokenizer, seed: int = 0):
    """20 layers of width 32 whose pad row (= eos) is zero: the smallest shape found whose gradients overflow from
    a zero row at position 0 (10 layers do not)."""
    import transformers

    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=20, num_attention_heads=1, num_key_value_heads=1,
                                      max_position_embeddings=64, rms_norm_eps=1e-5, initializer_range=0.3,
                                      pad_token_id=eos, bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def short_texts(tmp_path_factory) -> Path:
    """Lines of three words: with end-of-text after each, some packed blocks of 32 start with end-of-text."""
    folder = tmp_path_factory.mktemp("short-text")
    lines = [" ".join(line.split()[:3]) for line in english_lines(40, seed=5)]
    (folder / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "eval.txt").write_text("\n".join(english_lines(10, seed=6)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def deep_folder(tmp_path_factory) -> Path:
    tokenizer = byte_level_tokenizer(english_lines(300, seed=5))
    tokenizer.pad_token = tokenizer.eos_token
    model = deep_llama(tokenizer)
    assert model.get_input_embeddings().weight[tokenizer.eos_token_id].abs().sum() == 0  # transformers zeroed it
    return save_model(model, tokenizer, tmp_path_factory.mktemp("deep") / "model")


def _config(model: Path, texts: Path, output: Path, **options) -> TrainConfig:
    base = dict(model=str(model), train_text=str(texts / "train.txt"), eval_text=str(texts / "eval.txt"),
                output=str(output), steps=3, batch_size=8, sequence_length=32, save_steps=2, eval_steps=3,
                logging_steps=1, eval_sequences=2, preset="embeddings")
    base.update(options)
    return TrainConfig(**base)


def _history(output: Path) -> list[dict]:
    phase = next(output.glob("phase-*/final/phase.json"))
    return json.loads(phase.read_text())["log_history"]


# -- the cause: a zero, frozen end-of-text row ----------------------------------------------------------------------

def test_the_training_data_puts_end_of_text_at_the_start_of_a_block(deep_folder, short_texts):
    from langswap.models import load_tokenizer
    from langswap.training.data import pack, read_documents

    tokenizer = load_tokenizer(deep_folder)
    blocks = pack(tokenizer, read_documents(short_texts / "train.txt"), 32, "causal").blocks
    assert len(blocks) <= 8  # one update of batch 8 reads every block
    assert (blocks[:, 0] == tokenizer.eos_token_id).any()


def test_a_zero_pad_row_at_the_start_of_a_block_overflows_the_gradients_of_a_deep_model(deep_folder):
    """The mechanism itself, on the model as transformers loads it (the condition langswap must not train in)."""
    from langswap.models import load_model

    model = load_model(deep_folder).train()
    eos = model.config.eos_token_id
    ids = torch.tensor([[eos] + list(range(5, 20))])
    model(input_ids=ids, labels=ids).loss.backward()
    assert not torch.isfinite(model.get_input_embeddings().weight.grad).all()


@pytest.mark.parametrize("preset", ["embeddings", "transinner"])  # transinner: an embeddings, then a full phase
def test_a_model_with_a_zero_end_of_text_row_trains_to_finite_weights(preset, deep_folder, short_texts, tmp_path):
    report = train(_config(deep_folder, short_texts, tmp_path / "run", preset=preset, steps=4))
    history = [entry for phase in sorted((tmp_path / "run").glob("phase-*/final/phase.json"))
               for entry in json.loads(phase.read_text())["log_history"]]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    norms = [entry["grad_norm"] for entry in history if "grad_norm" in entry]
    assert len(losses) == 4 and all(0 < loss < 20 for loss in losses)  # a NaN loss used to be logged as 0
    assert all(torch.isfinite(torch.tensor(norm)) for norm in norms)
    from langswap.models import load_model

    trained = load_model(report.model)
    assert non_finite_parameters(trained) == []
    eos = trained.config.eos_token_id
    assert trained.get_input_embeddings().weight[eos].abs().sum() > 0  # filled, and no longer frozen at zero
    assert all(entry["bits_per_byte"] == entry["bits_per_byte"] for entry in report.curve["eval"])  # not NaN


def test_preparing_for_training_fills_zero_rows_and_unfreezes_the_pad_row(deep_folder, caplog):
    from langswap.models import load_model, load_tokenizer

    model, tokenizer = load_model(deep_folder), load_tokenizer(deep_folder)
    eos = tokenizer.eos_token_id
    before = model.get_input_embeddings().weight.detach().clone()
    report = prepare_embeddings_for_training(model, seed=3, tokenizer=tokenizer, where="the deep model")
    weight = model.get_input_embeddings().weight
    assert report == {"zero_rows_filled": [eos], "padding_idx_cleared": eos}
    assert model.get_input_embeddings().padding_idx is None
    assert torch.equal(weight[1:], before[1:]) and weight[eos].abs().sum() > 0
    assert "1 all-zero input embedding row" in caplog.text and "<|endoftext|>" in caplog.text
    again = load_model(deep_folder)
    prepare_embeddings_for_training(again, seed=3)
    assert torch.equal(again.get_input_embeddings().weight, weight)  # seeded: every process and resume alike
    ids = torch.tensor([[eos, 5, 6, 7]])
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    assert weight.grad[eos].abs().sum() > 0 and torch.isfinite(weight.grad).all()


# -- a stop on non-finite numbers -----------------------------------------------------------------------------------

class PoisonAt:
    """A callback that writes NaN into every input embedding row before update `step` + 1."""

    def __new__(cls, step: int):
        from transformers import TrainerCallback

        class Poison(TrainerCallback):
            def on_step_begin(self, args, state, control, model=None, **kwargs):
                if state.global_step == step:
                    with torch.no_grad():
                        model.get_input_embeddings().weight[:, 0] = float("nan")

        return Poison()


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> Path:
    tokenizer = byte_level_tokenizer(english_lines(300, seed=5))
    return save_model(tiny_model("llama", len(tokenizer)), tokenizer, tmp_path_factory.mktemp("llama") / "model")


def test_training_stops_at_the_first_nan_and_keeps_the_last_good_checkpoint(llama_folder, short_texts, tmp_path):
    from safetensors.torch import load_file

    output = tmp_path / "run"
    config = _config(llama_folder, short_texts, output, steps=8, save_steps=2, batch_size=2)
    with pytest.raises(TrainingDivergedError) as caught:
        train(config, callbacks=[PoisonAt(4)])
    message = str(caught.value)
    for expected in ("update 5", "phase 1-embeddings", "learning rate", "precision fp32", "NaN",
                     "checkpoint-4", "learning_rate"):
        assert expected in message, expected
    record = json.loads((output / "langswap-train.json").read_text())
    assert record["status"] == "failed"
    assert record["failure"]["step"] == 5 and record["failure"]["phase"] == "1-embeddings"
    assert not (output / "model").exists()
    checkpoints = sorted(path.name for path in (output / "phase-1-embeddings").glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-2", "checkpoint-4"]  # the diverged update 5 is never saved
    weights = load_file(str(output / "phase-1-embeddings" / "checkpoint-4" / "model.safetensors"))
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_a_learning_rate_that_diverges_stops_the_cli_with_exit_code_2(llama_folder, short_texts, tmp_path, capsys):
    from langswap.cli import main

    output = tmp_path / "run"
    code = main(["-q", "train", "--model", str(llama_folder), "--train-text", str(short_texts / "train.txt"),
                 "--output", str(output), "--preset", "full", "--steps", "6", "--set", "batch_size=2",
                 "--set", "sequence_length=32", "--set", "learning_rate=1e12", "--set", "logging_steps=1"])
    assert code == 2
    error = unwrapped(capsys.readouterr().err)
    assert "training stopped at update" in error and "1e+12" in error
    assert json.loads((output / "langswap-train.json").read_text())["status"] == "failed"
    assert not (output / "model").exists()


@pytest.fixture(scope="module")
def infinite_folder(tmp_path_factory, llama_folder) -> Path:
    from langswap.models import load_model, load_tokenizer

    model = load_model(llama_folder)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("inf")
    return save_model(model, load_tokenizer(llama_folder), tmp_path_factory.mktemp("inf") / "model")


def test_training_refuses_a_model_with_an_infinite_weight(infinite_folder, short_texts, tmp_path):
    with pytest.raises(NumericalError, match=r"layers\.0\.mlp\.up_proj\.weight \(1 value\)"):
        train(_config(infinite_folder, short_texts, tmp_path / "run"))
    assert not (tmp_path / "run" / "model").exists()


def test_evaluate_reports_a_non_finite_model_as_an_error(infinite_folder, short_texts, capsys):
    from langswap.cli import main

    code = main(["-q", "evaluate", str(infinite_folder), "--text", str(short_texts / "eval.txt")])
    assert code == 2
    error = unwrapped(capsys.readouterr().err)
    assert "not a number" in error and "up_proj.weight" in error


def test_transfer_refuses_a_source_with_non_finite_weights(infinite_folder, tmp_path):
    from langswap.transfer import transfer, transfer_config

    config = transfer_config({"source_model": str(infinite_folder), "target_tokenizer": str(infinite_folder),
                              "output": str(tmp_path / "out"), "method": {"name": "overlap"}})
    with pytest.raises(NumericalError, match="source model .* holds NaN or infinite weights"):
        transfer(config)
    assert not (tmp_path / "out").exists()


def test_transfer_refuses_to_write_non_finite_rows(llama_folder, tmp_path):
    """A NaN source row copied by `overlap` into the target is named with the token it was made from."""
    from langswap.models import load_model, load_tokenizer
    from langswap.methods.provenance import refuse_non_finite_rows
    from langswap.methods.base import TransferInputs, run_method
    from langswap.tokens import Vocabulary

    tokenizer = load_tokenizer(llama_folder)
    vocabulary = Vocabulary(tokenizer)
    embeddings = load_model(llama_folder).get_input_embeddings().weight.detach().clone()
    embeddings[7] = float("nan")
    inputs = TransferInputs(vocabulary, vocabulary, embeddings)
    result = run_method("overlap", inputs)
    with pytest.raises(NumericalError, match=r"in 1 rows \(7 .*copied from 7 "):
        refuse_non_finite_rows(result, inputs)


def test_bench_reports_a_non_finite_measurement_as_an_error(infinite_folder, short_texts, tmp_path):
    from langswap.bench import _measure

    with pytest.raises(NumericalError, match="bench measurement of .*not a number"):
        _measure(infinite_folder, (short_texts / "eval.txt").read_text().splitlines(), None, False)
