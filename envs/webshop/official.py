"""Load WebShop's official product and instruction files into a :class:`Catalogue`.

Reproduces what WebShop's ``load_products`` (``web_agent_site/engine/engine.py``),
``get_human_goals`` / ``get_synthetic_goals`` (``engine/goal.py``) and the
baseline split (``baseline_models/env.py``) do, written afresh for our types:

- Products come from ``items_shuffle_1000.json`` (or the full ``items_shuffle.json``)
  in file order, truncated to ``num_products``; records whose asin is ``"nan"`` or
  longer than 10 characters, and repeated asins, are skipped, as in WebShop.
- Price: WebShop splits the ``pricing`` string on ``"$"`` and keeps the digits of
  each piece, so ``"$12.99"`` is one price and ``"$10.00 to $20.00"`` a range of
  the first two; a missing price is 100.0. For a range WebShop draws the price
  uniformly in ``[low, high]`` (``generate_product_prices``, unseeded); we draw it
  from ``random.Random(seed)`` in product order, so the same files and seed give
  the same prices.
- Options: ``customization_options`` group names and values lower-cased, ``/`` in a
  value shown as ``" | "``, groups that are ``None`` dropped.
- Attributes come from ``items_ins_v2*.json`` (``{asin: {"attributes": [...],
  "instruction": ..., "instruction_attributes": [...]}}``); a product without an
  entry has none (WebShop puts a ``DUMMY_ATTR`` there that never matches).
- Human goals (``items_human_ins.json``, ``{asin: [{"instruction",
  "instruction_attributes", "instruction_options"}, ...]}``): one goal per
  instruction with at least one attribute; synthetic goals: one per combination of
  the product's option values, for products with an ``instruction`` in the ins file.
- ``price_upper``: of the multiples of ten above the price, take the first four, draw
  two and keep the larger (:func:`sample_price_upper`); with fewer than two the
  limit is 1,000,000 and the instruction gets no price clause.
- Split: WebShop shuffles the goal list with ``random.seed(233)`` and its baselines
  evaluate on goals ``0-499`` (test), tune on ``500-1499`` (dev) and train on the
  rest. ``random.Random(233).shuffle`` permutes a list of a given length the same
  way whatever it holds, so when our goal list is built in WebShop's order the
  shuffled index -- our ``goal_id`` -- is WebShop's goal index. ``test_goals`` are
  ids below 500, ``train_goals`` ids from 1500; the dev ids are in neither
  (:func:`official_split` names each id's split).

Departures: attribute, option and goal-option strings are lower-cased (WebShop's
fuzzy matcher lower-cases them at match time; rapidfuzz does not), and a dict of
synthetic goal options keeps its values in option-name order.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import warnings
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from envs.webshop.schema import Catalogue, Goal, Product

PRODUCT_FILES = ("items_shuffle_1000.json", "items_shuffle.json")
ATTRIBUTE_FILES = ("items_ins_v2_1000.json", "items_ins_v2.json")
HUMAN_INSTRUCTION_FILE = "items_human_ins.json"

# WebShop's PRICE_RANGE (engine/goal.py): price limits are multiples of ten.
PRICE_STEPS = tuple(10.0 * i for i in range(1, 100))
NO_PRICE_LIMIT = 1_000_000.0
DEFAULT_PRICE = 100.0

SPLIT_TEST_END = 500  # goal ids [0, 500) are test (baseline_models/env.py)
SPLIT_DEV_END = 1500  # [500, 1500) dev, [1500, n) train
SHUFFLE_SEED = 233  # web_agent_text_env.py: random.seed(233); random.shuffle(goals)


def sample_price_upper(price: float, rng: random.Random) -> float | None:
    """WebShop's price limit for a goal: the larger of two draws among the next four tens.

    Returns None when fewer than two multiples of ten lie above ``price`` (WebShop
    then sets no limit and leaves the price clause out of the instruction).
    """
    above = [p for p in PRICE_STEPS if p > price][:4]
    if len(above) < 2:
        return None
    return max(rng.sample(above, 2))


def price_clause(price_upper: float) -> str:
    return f", and price lower than {price_upper:.2f} dollars"


def parse_pricing(pricing: Any) -> tuple[float, ...]:
    """Prices listed in a WebShop ``pricing`` string: one number, or the first two of a range.

    ``"$12.99"`` -> ``(12.99,)``; ``"$10.00 to $20.00"`` / ``"$10.00 - $20.00"`` ->
    ``(10.0, 20.0)``; ``"$1,299.00"`` -> ``(1299.0,)``; empty or None -> ``()``.
    A list of numbers (an already processed record) is taken as it is.
    """
    if pricing is None or pricing == "" or pricing == []:
        return ()
    if isinstance(pricing, (int, float)):
        return (float(pricing),)
    if isinstance(pricing, (list, tuple)):
        return tuple(float(p) for p in pricing[:2])
    prices = []
    for piece in str(pricing).split("$")[1:]:
        digits = re.sub(r"[^\d.]", "", piece).strip(".")
        if digits:
            prices.append(float(Decimal(digits)))
    return tuple(prices[:2])


def official_split(goal_id: int) -> str:
    """Return "test", "dev" or "train": WebShop's baseline split of the shuffled goal list."""
    if goal_id < SPLIT_TEST_END:
        return "test"
    return "dev" if goal_id < SPLIT_DEV_END else "train"


def load_official(
    data_dir: str | Path,
    *,
    num_products: int | None = None,
    human_goals: bool = True,
    seed: int = 0,
) -> Catalogue:
    """Read WebShop's official files from ``data_dir`` (see the module docstring).

    ``data_dir`` holds a product file (``items_shuffle_1000.json`` or
    ``items_shuffle.json``), an attribute file (``items_ins_v2_1000.json`` or
    ``items_ins_v2.json``) and, for ``human_goals``, ``items_human_ins.json``.
    ``seed`` draws prices inside listed ranges and the goals' price limits.
    """
    data_dir = Path(data_dir)
    product_path = _find(data_dir, PRODUCT_FILES, "product")
    attribute_path = _find(data_dir, ATTRIBUTE_FILES, "attribute")
    records = _read_json(product_path)
    attributes = _read_json(attribute_path)
    human = (
        _read_json(_find(data_dir, (HUMAN_INSTRUCTION_FILE,), "human instruction"))
        if human_goals
        else {}
    )
    if num_products is not None:
        records = records[:num_products]  # the file is already shuffled (WebShop's assumption)

    rng = random.Random(seed)
    products: list[Product] = []
    seen: set[str] = set()
    for record in records:
        asin = str(record.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        products.append(_to_product(record, attributes.get(asin, {}), rng))

    goals = (
        _human_goals(products, human, rng)
        if human_goals
        else _synthetic_goals(products, attributes, rng)
    )
    # WebShop's fixed shuffle; the position after it is the goal id.
    random.Random(SHUFFLE_SEED).shuffle(goals)
    goals = [_with_id(g, i) for i, g in enumerate(goals)]
    test = tuple(g.goal_id for g in goals if official_split(g.goal_id) == "test")
    dev = tuple(g.goal_id for g in goals if official_split(g.goal_id) == "dev")
    train = tuple(g.goal_id for g in goals if official_split(g.goal_id) == "train")
    if not train:
        warnings.warn(
            f"{len(goals)} goals from {data_dir}: WebShop's split trains on goal ids >= "
            f"{SPLIT_DEV_END}, so the train split is empty",
            stacklevel=2,
        )
    return Catalogue(
        tuple(products), tuple(goals), train_goals=train, test_goals=test, dev_goals=dev, source="official"
    )


def _find(data_dir: Path, names: tuple[str, ...], what: str) -> Path:
    for name in names:
        if (data_dir / name).is_file():
            return data_dir / name
    raise FileNotFoundError(
        f"WebShop {what} file not found: expected {' or '.join(names)} in {data_dir} "
        "(see envs/webshop/DATA.md for how to download the official files)"
    )


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _to_product(record: dict, ins: dict, rng: random.Random) -> Product:
    listed = parse_pricing(record.get("pricing", record.get("Price")))
    if not listed:
        price = DEFAULT_PRICE
    elif len(listed) == 1:
        price = listed[0]
    else:
        price = rng.uniform(*listed)

    options: dict[str, tuple[str, ...]] = {}
    for group, contents in (
        record.get("customization_options") or record.get("options") or {}
    ).items():
        if contents is None:
            continue
        values = [c["value"] if isinstance(c, dict) else c for c in contents]
        options[group.lower()] = tuple(str(v).strip().replace("/", " | ").lower() for v in values)

    bullets = record.get("small_description", record.get("BulletPoints", ()))
    bullets = (bullets,) if isinstance(bullets, str) else tuple(bullets or ())
    rating = record.get("average_rating", record.get("Rating"))
    try:
        rating = float(str(rating).split()[0]) if rating not in (None, "", "N.A.") else None
    except ValueError:
        rating = None
    return Product(
        asin=str(record["asin"]),
        name=str(record.get("name") or record.get("Title") or ""),
        category=str(record.get("category", "")),
        product_category=str(record.get("product_category", "")),
        query=str(record.get("query", "")).lower().strip(),
        price=float(price),
        description=str(record.get("full_description") or record.get("Description") or ""),
        bullet_points=tuple(str(b) for b in bullets if b),
        attributes=tuple(str(a).lower() for a in ins.get("attributes", ())),
        options=options,
        reviews=tuple(
            _review_text(r) for r in record.get("reviews") or record.get("Reviews") or ()
        ),
        rating=rating,
    )


def _review_text(review: Any) -> str:
    if isinstance(review, dict):
        return str(review.get("body") or review.get("review") or review.get("text") or "")
    return str(review)


def _goal(product: Product, text: str, attributes, options, price_upper: float | None) -> Goal:
    """A goal with id -1; ids are given after WebShop's shuffle."""
    return Goal(
        goal_id=-1,
        asin=product.asin,
        category=product.category,
        query=product.query,
        name=product.name,
        product_category=product.product_category,
        instruction_text=text + (price_clause(price_upper) if price_upper is not None else ""),
        attributes=tuple(str(a).lower() for a in attributes),
        goal_options=tuple(str(o).lower() for o in options),
        price_upper=NO_PRICE_LIMIT if price_upper is None else price_upper,
    )


def _human_goals(products: list[Product], human: dict, rng: random.Random) -> list[Goal]:
    goals = []
    for product in products:
        for ins in human.get(product.asin, ()):
            if not ins.get("instruction_attributes"):
                continue  # WebShop skips instructions without attributes
            options = ins.get("instruction_options") or ()
            options = options.values() if isinstance(options, dict) else options
            goals.append(
                _goal(
                    product,
                    ins["instruction"].strip("."),
                    ins["instruction_attributes"],
                    options,
                    sample_price_upper(product.price, rng),
                )
            )
    return goals


def _synthetic_goals(products: list[Product], attributes: dict, rng: random.Random) -> list[Goal]:
    goals = []
    for product in products:
        ins = attributes.get(product.asin, {})
        if not ins.get("instruction"):
            continue
        price_upper = sample_price_upper(product.price, rng)  # one limit per product, as in WebShop
        names = sorted(product.options)
        for combination in itertools.product(*(product.options[n] for n in names)):
            option_text = ", and ".join(
                f"{n}: {v}" for n, v in zip(names, combination, strict=True)
            )
            text = ins["instruction"] + (f" with {option_text}" if option_text else "")
            goals.append(
                _goal(
                    product, text, ins.get("instruction_attributes") or (), combination, price_upper
                )
            )
    return goals


def _with_id(goal: Goal, goal_id: int) -> Goal:
    return replace(goal, goal_id=goal_id)
