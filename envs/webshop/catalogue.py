"""Our own synthetic WebShop catalogue: products and goals in WebShop's schema.

WebShop's real catalogue (1.18M scraped Amazon products, 12k human instructions)
cannot be downloaded on these machines, so the env ships this generator. It is
seeded (``random.Random(seed)``, no global RNG, no set iteration), so a seed gives
the same catalogue in every process whatever ``PYTHONHASHSEED`` is.

Products: 45 product types, nine in each of WebShop's five categories; each type
has a breadcrumb, a search query (WebShop's type signal), variant words for titles,
a pool of mined-style attributes and a pool of option groups; 27 products per type
(1,215 in all) draw a brand, a variant, 2-5 attributes from the pool, 0-3 option
groups with 2-6 values each, and a price in the type's range. Products of a type
share the query and overlap in attributes, so a search for the type finds
several candidates and only some carry the goal's attributes, options and price.

Goals follow WebShop's synthetic goals (``get_synthetic_goals``): a product, 1-3 of
its attributes, one value of each of its option groups, and WebShop's price limit
(the larger of two draws among the next four multiples of ten above the price,
:func:`envs.webshop.official.sample_price_upper`); the instruction is lower case,
names the query, the attributes and the option values, and ends with
", and price lower than X dollars". Buying the goal's own product with the goal
options earns reward 1. One or two goals per product (about 2,000 in all).

Split: goals are shuffled with the seed and numbered in that order; ids below
:data:`NUM_TEST_GOALS` (500, WebShop's test size) are test, the rest train.

The word tables (category roots, brands, product types, instruction openings,
review templates) are data, in ``catalogue_words.json`` next to this module
(:func:`words`); this module is the generator.
"""

from __future__ import annotations

import functools
import json
import random
from importlib import resources
from typing import NamedTuple

from envs.webshop.official import price_clause, sample_price_upper
from envs.webshop.schema import Catalogue, Goal, Product

PRODUCTS_PER_TYPE = 27
NUM_TEST_GOALS = 500

WORDS_FILE = "catalogue_words.json"  # next to this module; shipped as package data


class ProductType(NamedTuple):
    """One product type of the word tables (``types`` in :data:`WORDS_FILE`)."""

    query: str  # WebShop's search query for the type
    noun: str  # in titles
    breadcrumb: str  # under the category's root
    variants: tuple[str, ...]  # title words, one per product
    attributes: tuple[str, ...]  # the pool a product draws 2-5 from
    options: dict[str, tuple[str, ...]]  # option group -> the values a product draws from
    price: tuple[float, float]  # the range a product's price is drawn from


class Words(NamedTuple):
    """The word tables the generator draws from, as read from :data:`WORDS_FILE`."""

    roots: dict[str, str]  # category -> breadcrumb root
    brands: dict[str, tuple[str, ...]]  # category -> brand names
    types: dict[str, tuple[ProductType, ...]]  # category -> its product types
    starts: tuple[str, ...]  # openings of instructions
    reviews: tuple[str, ...]  # review templates ({noun}, {attr})


@functools.cache
def words() -> Words:
    """The word tables, read once from :data:`WORDS_FILE`.

    Its ``options`` map a group name to a list of values or to ``"@name"``, the
    list ``shared_values[name]`` (colours, wood finishes, apparel sizes). The
    attributes of a type never fuzzily match each other, nor do the values of one
    option group (token_set_ratio <= 85), so a goal's attribute or option is met
    only by itself.
    """
    data = json.loads(resources.files(__package__).joinpath(WORDS_FILE).read_text(encoding="utf-8"))
    shared = data["shared_values"]

    def values(spec: str | list[str]) -> tuple[str, ...]:
        return tuple(shared[spec[1:]] if isinstance(spec, str) else spec)

    types = {
        category: tuple(
            ProductType(
                query=t["query"],
                noun=t["noun"],
                breadcrumb=t["breadcrumb"],
                variants=tuple(t["variants"]),
                attributes=tuple(t["attributes"]),
                options={name: values(spec) for name, spec in t["options"].items()},
                price=(t["price"][0], t["price"][1]),
            )
            for t in entries
        )
        for category, entries in data["types"].items()
    }
    brands = {category: tuple(names) for category, names in data["brands"].items()}
    return Words(data["roots"], brands, types, tuple(data["starts"]), tuple(data["reviews"]))


@functools.lru_cache(maxsize=8)
def load_default_catalogue(seed: int = 0) -> Catalogue:
    """The synthetic catalogue for ``seed`` (see the module docstring); cached per seed."""
    rng = random.Random(seed)
    products = _products(rng)
    drafts = [g for p in products for g in _goals_for(p, rng)]
    rng.shuffle(drafts)  # goal ids do not follow product order
    goals = tuple(_goal(p, i, *rest) for i, (p, *rest) in enumerate(drafts))
    test = tuple(range(min(NUM_TEST_GOALS, len(goals))))
    train = tuple(range(len(test), len(goals)))
    return Catalogue(products, goals, train_goals=train, test_goals=test, source="synthetic")


def _products(rng: random.Random) -> tuple[Product, ...]:
    table = words()
    products = []
    asins: set[str] = set()
    for category, types in table.types.items():
        brands = table.brands[category]
        for query, noun, crumb, variants, pool, groups, (lo, hi) in types:
            for _ in range(PRODUCTS_PER_TYPE):
                asin = _asin(rng, asins)
                brand, variant = rng.choice(brands), rng.choice(variants)
                attributes = tuple(rng.sample(pool, rng.randint(2, min(5, len(pool)))))
                options = _options(groups, rng)
                price = round(int(rng.uniform(lo, hi)) + rng.choice((0.99, 0.49, 0.95, 0.0)), 2)
                title = ", ".join(
                    [f"{brand} {variant} {noun}", *(a.title() for a in attributes[:2])]
                )
                products.append(
                    Product(
                        asin=asin,
                        name=title,
                        category=category,
                        product_category=f"{table.roots[category]} › {crumb}",
                        query=query,
                        price=price,
                        description=(
                            f"The {brand} {variant.lower()} {noun.lower()} is made for everyday use. "
                            f"It is {_join(attributes)}. Backed by our satisfaction promise."
                        ),
                        bullet_points=(
                            *(f"{a.upper()}: {_bullet(a, noun)}" for a in attributes),
                            f"FROM {brand.upper()}",
                        ),
                        attributes=attributes,
                        options=options,
                        reviews=tuple(
                            r.format(noun=noun.lower(), attr=attributes[0])
                            for r in rng.sample(table.reviews, rng.randint(2, 4))
                        ),
                        rating=round(rng.uniform(3.0, 5.0), 1),
                    )
                )
    return tuple(products)


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _options(groups: dict[str, tuple[str, ...]], rng: random.Random) -> dict[str, tuple[str, ...]]:
    names = list(groups)
    # About one product in six has no options, like many of WebShop's.
    count = 0 if rng.random() < 0.15 else rng.randint(1, min(3, len(names)))
    chosen = sorted(rng.sample(names, count), key=names.index)
    options = {}
    for name in chosen:
        values = groups[name]
        picked = rng.sample(
            range(len(values)), rng.randint(min(2, len(values)), min(6, len(values)))
        )
        options[name] = tuple(values[i] for i in sorted(picked))
    return options


def _goals_for(product: Product, rng: random.Random) -> list[tuple]:
    """One or two (product, attributes, options, price_upper, template) drafts."""
    drafts = []
    for _ in range(1 + (rng.random() < 0.68)):
        attributes = tuple(
            rng.sample(product.attributes, rng.randint(1, min(3, len(product.attributes))))
        )
        options = tuple((name, rng.choice(values)) for name, values in product.options.items())
        price_upper = sample_price_upper(product.price, rng)
        drafts.append(
            (
                product,
                attributes,
                options,
                price_upper,
                rng.randrange(3),
                rng.randrange(3),
                rng.choice(words().starts),
            )
        )
    return drafts


def _goal(
    product: Product,
    goal_id: int,
    attributes,
    options,
    price_upper,
    form: int,
    option_form: int,
    start: str,
) -> Goal:
    query, attrs = product.query, _join(attributes)
    if form == 0:
        text = f"{start} {_article(attrs)} {attrs} {query}"
    elif form == 1:
        text = f"{start} {_article(query)} {query} that is {attrs}"
    else:
        text = f"{start} {query}, {attrs}"
    if options:
        if option_form == 0:
            text += " in " + " and ".join(f"{v} {n}" for n, v in options)
        elif option_form == 1:
            text += " with " + ", and ".join(
                f"{n}: {v}" for n, v in options
            )  # get_synthetic_goals' form
        else:
            text += ", " + ", ".join(v for _, v in options)
    return Goal(
        goal_id=goal_id,
        asin=product.asin,
        category=product.category,
        query=query,
        name=product.name,
        product_category=product.product_category,
        instruction_text=text + price_clause(price_upper),
        attributes=attributes,
        goal_options=tuple(v for _, v in options),
        price_upper=price_upper,
    )


def _article(phrase: str) -> str:
    return "an" if phrase[0] in "aeiou" else "a"


def _join(words: tuple[str, ...] | list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _bullet(attribute: str, noun: str) -> str:
    return f"this {noun.lower()} is {attribute}, as tested by our team."
