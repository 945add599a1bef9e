"""Training recipes, one file each (or a few alike in one file), registered by name (see base.py for the interface).

`preset:` in a train config names the recipe; `recipe:` holds its options."""

from langswap.training.recipes.base import (Recipe, RecipeOptions, describe_recipes, get_recipe, make_recipe,
                                            plan_phases, recipe_names, recipe_options, register_recipe)

__all__ = ["Recipe", "RecipeOptions", "describe_recipes", "get_recipe", "make_recipe", "plan_phases", "recipe_names",
           "recipe_options", "register_recipe"]
