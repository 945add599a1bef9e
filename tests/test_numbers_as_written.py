"""Numbers as people write them: 5e-4, 1E-3, 1_000 and .5 are numbers wherever a number is expected.

PyYAML follows YAML 1.1, whose floats need a dot, so `learning_rate: 5e-4` (and `--set learning_rate=5e-4`, read as
YAML) arrive as the string '5e-4'; a JSON config read through the same loader does too.
"""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import unwrapped
from langswap.cli import build_parser, main
from langswap.config import apply_overrides, as_number, from_dict
from langswap.errors import ConfigError
from langswap.training.run import TrainConfig

REQUIRED = {"model": "m", "train_text": "t.txt", "output": "out"}


@pytest.mark.parametrize("text, number", [("5e-4", 5e-4), ("1E-3", 1e-3), ("1_000", 1000), (".5", 0.5),
                                          ("-2.5e+3", -2500.0), ("3", 3), ("1.", 1.0), (" 2e-5 ", 2e-5)])
def test_strings_that_spell_numbers_are_numbers(text, number):
    assert as_number(text) == number and type(as_number(text)) is type(number)


@pytest.mark.parametrize("text", ["abc", "1e", "e5", "nan", "inf", "-inf", "1__0", "_1", "0x10", "1,5", "", "1e999"])
def test_other_strings_are_not(text):
    assert as_number(text) is None


def test_yaml_as_people_write_it():
    text = "learning_rate: 5e-4\nadam_epsilon: 1E-6\nsteps: 1_000\nwarmup_fraction: .5\nsave_steps: 1e3\n"
    config = from_dict(TrainConfig, {**REQUIRED, **yaml.safe_load(text)})
    assert (config.learning_rate, config.adam_epsilon, config.steps, config.warmup_fraction, config.save_steps) == \
        (5e-4, 1e-6, 1000, 0.5, 1000)
    assert isinstance(config.steps, int) and isinstance(config.save_steps, int)


def test_json_config_read_through_the_yaml_loader(tmp_path):
    from langswap.config import load_yaml

    path = tmp_path / "train.json"
    path.write_text(json.dumps({**REQUIRED, "steps": 20}).replace('"steps": 20', '"learning_rate": 5e-4, "steps": 2E1'))
    config = from_dict(TrainConfig, load_yaml(path))
    assert config.learning_rate == 5e-4 and config.steps == 20


def test_set_overrides_as_people_write_them():
    overrides = ["learning_rate=5e-4", "max_grad_norm=1E-3", "steps=1_000", "warmup_fraction=.5"]
    config = from_dict(TrainConfig, apply_overrides(REQUIRED, overrides))
    assert (config.learning_rate, config.max_grad_norm, config.steps, config.warmup_fraction) == (5e-4, 1e-3, 1000, .5)


def test_method_options_as_people_write_them():
    from langswap.transfer import transfer_config

    config = transfer_config({"source_model": "m", "target_tokenizer": "t", "output": "o",
                              "method": {"name": "wechsel", "temperature": "1e-1", "neighbors": "1_0"}})
    assert config.method.temperature == 0.1 and config.method.neighbors == 10


@pytest.mark.parametrize("key, value, message", [
    ("learning_rate", "fast", "'learning_rate' must be a number, not 'fast'"),
    ("steps", "2.5", "'steps' must be an integer, not 2.5"),
    ("steps", "many", "'steps' must be an integer, not 'many'"),
    ("warmup_fraction", "true", "'warmup_fraction' must be a number, not True"),
])
def test_values_that_are_not_numbers_keep_their_clear_error(key, value, message):
    with pytest.raises(ConfigError) as caught:
        from_dict(TrainConfig, apply_overrides(REQUIRED, [f"{key}={value}"]))
    assert message in str(caught.value)


def test_cli_count_flags_take_counts_as_written(capsys):
    parser = build_parser()
    args = parser.parse_args(["train", "--steps", "2e3"])
    assert args.steps == 2000
    args = parser.parse_args(["train", "--steps", "2_000"])
    assert args.steps == 2000
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--steps", "2.5"])
    assert "not a whole number" in unwrapped(capsys.readouterr().err)


def test_a_yaml_learning_rate_reaches_the_run(tmp_path, capsys):
    """The reported case end to end: `learning_rate: 5e-4` in a YAML config used to be refused."""
    from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model

    lines = english_lines(300, seed=5)
    tokenizer = byte_level_tokenizer(lines)
    model = save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, tmp_path / "model")
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tmp_path / "train.yaml"
    config.write_text(f"model: {model}\ntrain_text: {tmp_path / 'train.txt'}\noutput: {tmp_path / 'run'}\n"
                      "learning_rate: 5e-4\nsteps: 2\nbatch_size: 2\nsequence_length: 32\npreset: embeddings\n")
    assert main(["-q", "train", str(config), "--set", "adam_epsilon=1E-8"]) == 0
    record = json.loads((tmp_path / "run" / "langswap-train.json").read_text())
    assert record["config"]["learning_rate"] == 5e-4 and record["config"]["adam_epsilon"] == 1e-8
    assert record["phases"][0]["learning_rate"] == 5e-4
