"""Training recipes: every registered recipe resumes bitwise, a recipe is one file, recipe options are checked."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from langswap.errors import ConfigError
from langswap.training.recipes import recipe_names
from langswap.training.run import TrainConfig, train
import test_training
from test_training import Crash, _config, _state

models, texts = test_training.models, test_training.texts  # the tiny models and texts of the training tests

# Options per recipe for a run of 8 updates that shows what the recipe does; a registered recipe without a row fails
# test_every_recipe_has_a_row. Tik-to-Tok settles at update 4 (a tolerance of 1 settles as soon as two windows of 2
# updates exist), before its at most 6 embeddings-only updates, so its full phase is re-planned to the 4 left over.
ROWS = {
    "wechsel": {}, "fullrand": {}, "full": {}, "embeddings": {},
    "transinner": {"recipe": {"embedding_fraction": 0.25}},
    "adapters": {"recipe": {"embedding_fraction": 0.25, "rank": 2}},
    "tiktotok": {"recipe": {"embedding_fraction": 0.75, "settle_window": 2, "settle_tolerance": 1.0}},
    # RAMEN's bilingual run: the source model and text are the test's (PATHS below), the sync every 3rd update
    "ramen": {"recipe": {"source_model": "GPT2", "source_text": "TRAIN", "lookahead_k": 3, "warmup_updates": 2}},
    # trains the test's GPT-2 transferred into its own tokenizer extended by 20 tokens (`extended_gpt2`)
    "extension": {"recipe": {"new_rows_fraction": 0.25}},
}


def _options(name: str, models, texts) -> dict:
    """ROWS[name] with the test's model and text in place of GPT2 and TRAIN."""
    paths = {"GPT2": str(models["gpt2"]), "TRAIN": str(texts / "train.txt")}
    row = json.loads(json.dumps(ROWS[name]))
    for key, value in row.get("recipe", {}).items():
        row["recipe"][key] = paths.get(value, value) if isinstance(value, str) else value
    return row


def test_every_recipe_has_a_row():
    assert sorted(ROWS) == recipe_names()


def _crash_after(updates: int):
    """A callback that stops the run like a kill after its `updates`-th update, counted over all its phases."""
    from transformers import TrainerCallback

    class CrashAfter(TrainerCallback):
        count = 0

        def on_step_end(self, args, state, control, **kwargs):
            self.count += 1
            if self.count == updates:
                raise Crash(f"crash after {updates} updates")

    return CrashAfter()


def _resumes_bitwise(model: Path, texts: Path, root: Path, crashes: tuple[int, ...], **options):
    """Train uninterrupted; train again stopped after `crashes[0]` updates, resumed and stopped after `crashes[1]`,
    ...; resume to the end. Both runs end with the same phases, weights and training curve. (Without held-out text:
    plotting the curve at every evaluation would take most of the time; evaluating is tested not to move the
    weights in test_training.py.)"""
    reference = train(_config(model, texts, root / "reference", **options))
    config = _config(model, texts, root / "interrupted", **options)
    for updates in crashes:
        with pytest.raises(Crash):
            train(config, callbacks=[_crash_after(updates)])
    resumed = train(config)
    assert resumed.resumed
    assert [(p.name, p.steps) for p in resumed.phases] == [(p.name, p.steps) for p in reference.phases]
    a, b = _state(reference.model), _state(resumed.model)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert [p.train_loss for p in resumed.phases] == [p.train_loss for p in reference.phases]
    assert resumed.curve["train"] == reference.curve["train"]
    return reference


@pytest.fixture(scope="module")
def extended_gpt2(models, tmp_path_factory) -> Path:
    """The test's GPT-2 transferred into its tokenizer extended by 20 tokens of ciphered text."""
    from conftest import cipher_word, english_lines

    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.extension import extend_tokenizer
    from langswap.transfer import transfer, transfer_config

    folder = tmp_path_factory.mktemp("extended-gpt2")
    lines = [" ".join(cipher_word(word) for word in line.split()) for line in english_lines(400, seed=7)]
    save_tokenizer(extend_tokenizer(load_tokenizer(models["gpt2"]), lines, 20).tokenizer, folder / "tokenizer")
    transfer(transfer_config({"source_model": str(models["gpt2"]), "target_tokenizer": str(folder / "tokenizer"),
                              "output": str(folder / "model"), "method": "fvt"}))
    return folder / "model"


@pytest.mark.parametrize("name", recipe_names())
def test_every_recipe_resumes_bitwise(name, models, texts, tmp_path, request):
    """Stopped after its 3rd update (past the checkpoint at 2), and the resumed run after its 4th (in the second
    phase of a two-phase recipe): the run ends bitwise where an uninterrupted one ends."""
    model = request.getfixturevalue("extended_gpt2") if name == "extension" else models["gpt2"]
    reference = _resumes_bitwise(model, texts, tmp_path, (3, 4), preset=name, steps=8, save_steps=2,
                                 logging_steps=2, eval_text=None, **_options(name, models, texts))
    assert sum(p.steps for p in reference.phases) == 8
    if name == "tiktotok":
        assert [p.steps for p in reference.phases] == [4, 4]


def test_a_masked_bilingual_run_resumes_bitwise(models, texts, tmp_path):
    """The source half of a masked LM's batches is masked from the update's own generator, as the target half."""
    row = {"recipe": {"source_model": str(models["bert"]), "source_text": str(texts / "train.txt"),
                      "lookahead_k": 3, "warmup_updates": 2}}
    reference = _resumes_bitwise(models["bert"], texts, tmp_path, (3,), preset="ramen", steps=6, save_steps=2,
                                 logging_steps=2, eval_text=None, **row)
    assert reference.objective == "masked"


# -- a recipe is one file ----------------------------------------------------------------------------------------------

THROWAWAY = '''
"""A throwaway recipe: the layer norms alone with SGD on a halving rate, then the embeddings with AdamW until
`stop_after` updates."""

from dataclasses import dataclass, field

import torch

from langswap.errors import ConfigError
from langswap.training.phases import Phase, register_schedule
from langswap.training.recipes import Recipe, RecipeOptions, register_recipe

STARTED = []


@dataclass(frozen=True, kw_only=True)
class NormsFirstOptions(RecipeOptions):
    norm_steps: int = field(default=2, metadata={"help": "Updates of the norms phase."})
    stop_after: int = field(default=100, metadata={"help": "The embeddings phase ends after this many updates."})


@register_schedule("throwaway-halving")
def halving(phase, step):
    return 0.5 ** step


@register_recipe("throwaway-norms-first", options=NormsFirstOptions)
class NormsFirst(Recipe):
    """Norms with SGD on a halving rate, then embeddings until stop_after updates."""

    def validate(self):
        if not 0 < self.options.norm_steps < self.config.steps:
            raise ConfigError("recipe.norm_steps must leave steps for the embeddings phase.")

    def phases(self, objective, done=()):
        first = self.options.norm_steps
        rest = self.config.steps - first
        return [Phase("1-norms", "norms", first, 0.1, 0, schedule="throwaway-halving"),
                Phase("2-embeddings", "embeddings", rest, self.peak(objective), self.warmup(rest), stops_early=True)]

    def trainable_parameters(self, phase, model):
        if phase.trainable == "norms":
            return [p for name, p in model.named_parameters() if ".ln_" in name]
        return super().trainable_parameters(phase, model)

    def optimizer(self, phase, parameter_groups):
        return torch.optim.SGD(parameter_groups, lr=phase.learning_rate) if phase.trainable == "norms" else None

    def on_phase_start(self, phase, model):
        STARTED.append(phase.name)

    def stop_reason(self, phase, log_history, step):
        return "enough updates" if step >= self.options.stop_after else None
'''


@pytest.fixture
def registries():
    """The recipe and schedule registries lose what a test registers (a throwaway stays out of other tests)."""
    from langswap.training.phases import SCHEDULES
    from langswap.training.recipes.base import RECIPES

    RECIPES.load()
    before = {id(table): set(table) for table in (RECIPES, SCHEDULES)}
    yield
    for table in (RECIPES, SCHEDULES):
        for name in set(table) - before[id(table)]:
            del table[name]


def _import_file(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_recipe_in_one_file_trains_with_its_own_phases_parameters_optimizer_schedule_and_stop(
        registries, models, texts, tmp_path):
    from transformers import TrainerCallback

    (tmp_path / "throwaway_recipe.py").write_text(THROWAWAY, encoding="utf-8")
    module = _import_file(tmp_path / "throwaway_recipe.py")
    seen = []

    class Record(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            inner = getattr(optimizer, "optimizer", optimizer)
            seen.append((type(inner).__name__, inner.param_groups[0]["lr"]))

    options = dict(preset="throwaway-norms-first", steps=8, eval_text=None, recipe={"stop_after": "3"},
                   keep_phase_models=True)
    report = train(_config(models["gpt2"], texts, tmp_path / "run", **options), callbacks=[Record()])
    assert [(p.name, p.steps, p.planned_steps) for p in report.phases] == [("1-norms", 2, 2),
                                                                                  ("2-embeddings", 3, 6)]
    assert module.STARTED == ["1-norms", "2-embeddings"]
    assert [name for name, _ in seen] == ["SGD", "SGD", "AdamW", "AdamW", "AdamW"]
    assert [lr for _, lr in seen[:2]] == pytest.approx([0.1, 0.05])
    start, middle = _state(models["gpt2"]), _state(tmp_path / "run" / "phase-1-norms" / "final")
    changed = {name for name in start if not torch.equal(start[name], middle[name])}
    assert changed and all(".ln_" in name for name in changed)
    record = json.loads((tmp_path / "run" / "langswap-train.json").read_text())
    assert record["config"]["recipe"] == {"norm_steps": 2, "stop_after": 3}

    # checkpoints and resume serve it as they serve the built-in recipes
    _resumes_bitwise(models["gpt2"], texts, tmp_path / "resume", (3,), save_steps=2, **options)


def test_batch_counts_round_the_shares_by_largest_remainder():
    from langswap.training.data import Stream, batch_counts

    def streams(*shares):
        return [Stream(f"s{index}", "x", share) for index, share in enumerate(shares)]

    assert batch_counts(streams(1.0), 4) == [4]
    assert batch_counts(streams(0.5, 0.5), 4) == [2, 2]
    assert batch_counts(streams(0.5, 0.5), 3) == [2, 1]  # a tie goes to the earlier stream
    assert batch_counts(streams(0.25, 0.75), 6) == [2, 4]  # 1.5 and 4.5: the tie again to the first
    assert batch_counts(streams(0.2, 0.3, 0.5), 8) == [2, 2, 4]  # 1.6, 2.4, 4.0


def test_mixed_slices_compose_every_micro_batch_from_the_shares_and_continue_each_stream():
    from langswap.training.data import MixedSlice, stream_indices

    first = [{"input_ids": torch.tensor([index])} for index in range(5)]
    second = [{"input_ids": torch.tensor([100 + index])} for index in range(7)]
    whole = MixedSlice([first, second], [1, 3], seed=3, start=0, count=4 * 6)
    items = [whole[index] for index in range(len(whole))]
    assert [item["stream_ids"] for item in items] == [0, 1, 1, 1] * 6
    # each stream is read in its own seeded order, epoch after epoch, as a single-stream run reads its text
    assert [int(item["input_ids"]) for item in items if item["stream_ids"] == 0] == stream_indices(5, 3, 0, 6)
    assert [int(item["input_ids"]) - 100 for item in items if item["stream_ids"] == 1] == stream_indices(7, 4, 0, 18)
    # a later phase's slice goes on where the one before stopped
    later = MixedSlice([first, second], [1, 3], seed=3, start=8, count=8)
    assert [int(later[index]["input_ids"]) for index in range(8)] == [int(item["input_ids"]) for item in items[8:16]]
    with pytest.raises(ValueError, match="whole micro-batch"):
        MixedSlice([first, second], [1, 3], seed=3, start=2, count=4)


class _Bilingual:
    """A recipe written in a test: one phase over two texts, `first` and `second`, by `recipe.first_share`."""

    @staticmethod
    def register(second_text: Path):
        from langswap.training.data import Stream
        from langswap.training.recipes import RecipeOptions, register_recipe
        from langswap.training.recipes.single_phase import OnePhase

        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Options(RecipeOptions):
            first_share: float = 0.5

        @register_recipe("throwaway-bilingual", options=Options)
        class Bilingual(OnePhase):
            """Every batch from two texts, by their shares."""

            def streams(self):
                return [Stream("first", self.config.train_text, self.options.first_share),
                        Stream("second", str(second_text), 1 - self.options.first_share)]

        return Bilingual


def test_a_recipe_mixes_two_texts_in_every_batch_and_resumes_bitwise(registries, models, texts, tmp_path):
    second = tmp_path / "second.txt"
    second.write_text("\n".join(line.upper() for line in (texts / "train.txt").read_text().splitlines()) + "\n")
    _Bilingual.register(second)


    from langswap.training import trainer as trainer_module

    seen = []
    original = trainer_module.PhaseTrainer.training_step

    def recording(self, model, inputs, *args, **kwargs):
        seen.append(inputs["stream_ids"].tolist())
        return original(self, model, inputs, *args, **kwargs)

    trainer_module.PhaseTrainer.training_step = recording
    try:
        report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="throwaway-bilingual", steps=3,
                               eval_text=None))
    finally:
        trainer_module.PhaseTrainer.training_step = original
    assert seen == [[0, 0, 1, 1]] * 3  # (the model, which reads no stream_ids, never got them)
    record = json.loads((tmp_path / "run" / "langswap-train.json").read_text())
    # both texts were packed: the second has its own (upper-case) tokens
    assert record["training_sequences"] > 0 and record["training_tokens"] > 0
    assert report.phases[0].steps == 3

    _resumes_bitwise(models["gpt2"], texts, tmp_path / "resume", (3,), preset="throwaway-bilingual", steps=6,
                     save_steps=2, logging_steps=2, eval_text=None)


def test_stream_shares_that_leave_a_stream_out_of_a_batch_are_refused(registries, models, texts, tmp_path):
    _Bilingual.register(texts / "eval.txt")
    with pytest.raises(ConfigError, match="no sequence of a batch .*raise batch_size to at least 6"):
        train(_config(models["gpt2"], texts, tmp_path / "run", preset="throwaway-bilingual",
                      recipe={"first_share": 0.9}))
    with pytest.raises(ConfigError, match="must be positive and sum to 1"):
        train(_config(models["gpt2"], texts, tmp_path / "run", preset="throwaway-bilingual",
                      recipe={"first_share": 1.5}))
    assert not (tmp_path / "run").exists()


# -- options --------------------------------------------------------------------------------------------------------

def test_recipe_options_are_the_named_recipes_and_checked_where_the_config_is_made():
    from langswap.config import apply_overrides, from_dict, to_dict

    config = from_dict(TrainConfig, apply_overrides({"preset": "tiktotok"}, ["recipe.settle_tolerance=1e-2",
                                                                             "recipe.settle_window=2e1"]))
    assert (config.recipe.settle_tolerance, config.recipe.settle_window, config.recipe.full_lr_scale) == (0.01, 20,
                                                                                                          0.2)
    assert from_dict(TrainConfig, to_dict(config)) == config
    assert to_dict(TrainConfig())["recipe"] == {}  # wechsel has no options
    with pytest.raises(ConfigError, match=r"unknown key 'recipe.settle_windw'. Did you mean 'settle_window'"):
        TrainConfig(preset="tiktotok", recipe={"settle_windw": 2})
    with pytest.raises(ConfigError, match="recipe 'wechsel' has no options; remove recipe: \\(settle_window\\)"):
        TrainConfig(recipe={"settle_window": 2})
    with pytest.raises(ConfigError, match="are not the options of recipe 'tiktotok'"):
        dataclasses.replace(TrainConfig(preset="transinner"), preset="tiktotok")
    with pytest.raises(ConfigError, match="recipe.embedding_fraction is 1.5; it must be between 0 and 1"):
        TrainConfig(model=".", train_text=__file__, output="o", preset="transinner",
                    recipe={"embedding_fraction": 1.5}).validate()


def test_init_config_lists_every_recipe_option_with_its_default():
    from langswap.commands import describe_fields
    from langswap.training.recipes import get_recipe

    lines = describe_fields(TrainConfig)
    (line,) = [line for line in lines if line.startswith("recipe ")]
    for name in recipe_names():
        for field in dataclasses.fields(get_recipe(name).options_class):
            assert f"{field.name} ({field.default!r}): {field.metadata['help']}" in line
    assert "tiktotok: " in line and "transinner: " in line


@pytest.mark.parametrize("key", ["embedding_fraction", "settle_window", "settle_tolerance", "full_lr_scale",
                                 "full_warmup_fraction"])
def test_a_recipe_option_given_at_the_top_level_says_where_it_goes(key):
    from langswap.config import from_dict

    with pytest.raises(ConfigError, match=rf"'{key}' is now 'recipe.{key}'.*--set recipe.{key}="):
        from_dict(TrainConfig, {"preset": "tiktotok", key: 0.5})
