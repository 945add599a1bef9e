"""The seams: a method, a resource kind and a method needing it are each added in one file, without touching any
other; a method naming a resource kind nobody registered fails when it is registered."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import pytest

from conftest import unwrapped
from langswap.errors import ConfigError, MissingResourceError
from langswap.methods.base import get_method, register_method, run_method
from langswap.resources.kinds import get_resource, resource_names


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_misspelt_resource_name_fails_at_registration():
    from dataclasses import dataclass

    from langswap.methods.base import MethodConfig

    @dataclass(frozen=True, kw_only=True)
    class MisspeltConfig(MethodConfig):
        pass

    with pytest.raises(ConfigError, match="unknown resource kind 'vectros'. Available resource kinds: .*vectors"):
        register_method("misspelt-resource", MisspeltConfig, requires=("vectros",))
    with pytest.raises(ConfigError):
        get_method("misspelt-resource")  # nothing was registered
    with pytest.raises(ValueError, match="tuple of resource kind names"):
        register_method("string-requires", MisspeltConfig, requires="vectors")


def test_the_vectors_kind_is_registered_with_its_keys():
    assert "vectors" in resource_names()
    assert get_resource("vectors").keys() == ["source_vectors", "target_vectors", "dictionary", "alignment",
                                              "joint_vectors"]


METHOD_FILE = '''
"""A throwaway method: every target row is the mean row, except rows whose token has a length-2 text, copied from
source id 0. Its resource kind, `constant`, gives the number of rows it places."""
from dataclasses import dataclass, field

import numpy as np

from langswap.errors import MissingResourceError
from langswap.methods.base import Kind, MethodConfig, TokenMapping, register_method
from langswap.resources.kinds import ResourceKind, register_resource


@dataclass(kw_only=True)
class ConstantFiles:
    constant_rows: int | None = field(default=None, metadata={"help": "Rows the throwaway method places."})


def check(config):
    if config.resources.constant_rows is None:
        raise MissingResourceError("set resources.constant_rows")


register_resource(ResourceKind("constant", ConstantFiles, check,
                               lambda config: (config.resources.constant_rows, {"rows": config.resources.constant_rows}),
                               "a number of rows"))


@dataclass(frozen=True, kw_only=True)
class ThrowawayConfig(MethodConfig):
    """A throwaway method."""

    fallback: str = "mean"
    source_row: int = field(default=0, metadata={"help": "Source row copied."})


@register_method("throwaway", ThrowawayConfig, requires=("constant",))
def throwaway(inputs, config, progress=False):
    """Copy one source row into the first rows."""
    mapping = TokenMapping.empty(len(inputs.target))
    rows = np.arange(min(inputs.resource("constant"), len(inputs.target)))
    rows = rows[[not inputs.target[int(row)].special for row in rows]]
    mapping.copy_rows(rows, np.full(len(rows), config.source_row))
    return mapping
'''


@pytest.fixture
def forget_throwaways():
    """Registries as they were before the test: the throwaway method and resource kind are removed again."""
    from langswap.methods import base
    from langswap.resources import kinds

    methods, names, resources = dict(base._REGISTRY), dict(base.METHOD_NAMES), dict(kinds._KINDS)
    yield
    for registry, saved in ((base._REGISTRY, methods), (base.METHOD_NAMES, names), (kinds._KINDS, resources)):
        registry.clear()
        registry.update(saved)
    sys.modules.pop("throwaway_method", None)


def test_a_throwaway_method_and_resource_in_one_file(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                     forget_throwaways):
    """The file registers a resource kind and a method needing it; a transfer config takes the kind's key, a
    transfer without it fails early naming the key, and the rows are what the method says."""
    import torch
    from transformers import AutoModelForCausalLM

    from langswap.config import from_dict
    from langswap.models import load_tokenizer
    from langswap.tokens import Vocabulary
    from langswap.transfer import TransferConfig, transfer

    (tmp_path / "throwaway_method.py").write_text(textwrap.dedent(METHOD_FILE), encoding="utf-8")
    load_file(tmp_path / "throwaway_method.py", "throwaway_method")
    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
            "method": {"name": "throwaway", "source_row": 3}}
    with pytest.raises(MissingResourceError, match="method 'throwaway' needs resource 'constant'.*constant_rows"):
        from_dict(TransferConfig, {**base, "output": str(tmp_path / "none")}).validate()
    config = from_dict(TransferConfig, {**base, "output": str(tmp_path / "out"), "resources": {"constant_rows": 6}})
    report = transfer(config)
    target = Vocabulary(load_tokenizer(target_tokenizer_folder))
    copied = [row for row in range(6) if not target[row].special]
    assert copied and report.counts["copied"] == len(copied)
    source = AutoModelForCausalLM.from_pretrained(gpt2_folder).get_input_embeddings().weight
    new = AutoModelForCausalLM.from_pretrained(report.output).get_input_embeddings().weight
    for row in copied:
        assert torch.equal(new[row], source[3])


def test_inputs_without_a_required_resource_name_it():
    import torch

    from langswap.methods.base import TransferInputs
    from langswap.tokens import Vocabulary

    from conftest import byte_level_tokenizer, english_lines

    vocabulary = Vocabulary(byte_level_tokenizer(english_lines(50), vocab_size=280))
    inputs = TransferInputs(vocabulary, vocabulary, torch.zeros(len(vocabulary), 4))
    with pytest.raises(MissingResourceError, match="no 'vectors' resource.*resources.source_vectors"):
        run_method("wechsel", inputs)


PLUGIN_RECIPE = '''

from langswap.training.recipes import register_recipe
from langswap.training.recipes.single_phase import OnePhase


@register_recipe("throwaway-plugin-recipe")
class PluginRecipe(OnePhase):
    """A recipe from a plugin file."""
'''


@pytest.fixture
def forget_plugins(forget_throwaways):
    from langswap.training.recipes.base import RECIPES

    RECIPES.load()
    recipes, modules = dict(RECIPES), set(sys.modules)
    yield
    RECIPES.clear()
    RECIPES.update(recipes)
    for name in set(sys.modules) - modules:
        if name.startswith("langswap_plugin_"):
            del sys.modules[name]


def test_a_plugin_file_given_to_the_cli_registers_its_method_resource_and_recipe(
        capsys, tmp_path, gpt2_folder, target_tokenizer_folder, forget_plugins):
    from langswap.cli import main

    plugin = tmp_path / "my_extension.py"
    plugin.write_text(textwrap.dedent(METHOD_FILE) + PLUGIN_RECIPE, encoding="utf-8")
    assert main(["--plugin", str(plugin), "methods"]) == 0
    assert "throwaway: Copy one source row into the first rows. (needs: constant: a number of rows, " \
           "resources.constant_rows)" in capsys.readouterr().out
    assert main(["--plugin", str(plugin), "recipes"]) == 0
    assert "throwaway-plugin-recipe: A recipe from a plugin file." in capsys.readouterr().out.splitlines()
    # loading the same file again (a second command in one process) registers nothing twice
    out = tmp_path / "out"
    assert main(["-q", "--plugin", str(plugin), "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer",
                 str(target_tokenizer_folder), "--output", str(out), "--method", "throwaway",
                 "--set", "resources.constant_rows=6"]) == 0
    assert json.loads((out / "langswap.json").read_text())["config"]["method"]["name"] == "throwaway"


def test_a_plugin_that_is_not_a_python_file_is_named(capsys, tmp_path):
    from langswap.cli import main

    assert main(["--plugin", str(tmp_path / "missing.py"), "recipes"]) == 2
    assert "plugin '" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("x")
    assert main(["--plugin", str(tmp_path / "notes.txt"), "recipes"]) == 2
    assert "is not a Python file" in unwrapped(capsys.readouterr().err)
