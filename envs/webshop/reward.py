"""WebShop's reward for a purchase (Yao et al. 2022, §3.1; ``web_agent_site/engine/goal.py``).

    r = r_type * (#attr_match + #option_match + 1[price <= price_upper])
               / (|goal attributes| + |goal options| + 1)

* An attribute of the goal matches when ``token_set_ratio`` (0-100, rounded to
  an integer as ``thefuzz`` returns it) against one of the product's attributes
  is above 85, or else when it occurs as a substring of the product's title,
  bullet points or description (lower-cased).
* An option of the goal matches when ``token_set_ratio`` against one of the
  selected option values is above 85, both reduced to their first colour word
  when they contain one (WebShop's ``normalize_color``).
* ``r_type`` checks that the product is of the requested type: 1.0 when the
  product's query equals the goal's, or at least two breadcrumb levels are
  shared, or more than 20% of the goal title's nouns occur in the product
  title; 0.5 otherwise; then 0.1 if that title score is below 0.1 and 0.0 if
  it is 0 (in that order, as in WebShop, so a title with no shared noun zeroes
  the reward whatever the query and breadcrumb say). A goal title with no
  nouns scores 0.2.

Departure from WebShop: it finds nouns with spaCy's ``en_core_web_sm`` tagger,
which cannot be installed on these offline machines. :func:`title_nouns`
approximates them: lower-case alphabetic tokens of two or more letters minus
stop words, minus a list of descriptive adjectives (colours, sizes,
qualities), minus tokens with adjective suffixes (-ful, -less, -able, -ible,
-ous, -ish) and minus anything with a digit. Nouns used attributively ("cotton
shirt", "leather sofa") are kept, as spaCy also tags most of them NOUN.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz, utils

from envs.webshop.schema import Goal, Product

FUZZY_THRESHOLD = 85

# Colour words used to normalise options: "navy blue" and "blue" both become
# "navy"/"blue" -> the first colour word in this list that occurs in the text.
COLOURS = (
    "aqua", "azure", "beige", "black", "blue", "blush", "bronze", "brown", "burgundy",
    "camel", "camo", "champagne", "charcoal", "chocolate", "coffee", "copper", "coral",
    "cream", "denim", "gold", "gray", "green", "grey", "indigo", "ivory", "khaki",
    "lavender", "lemon", "lilac", "lime", "magenta", "maroon", "mint", "mocha",
    "multicolor", "mustard", "natural", "navy", "nude", "olive", "orange", "peach",
    "pink", "plum", "purple", "red", "rose", "rust", "sand", "silver", "tan", "taupe",
    "teal", "turquoise", "violet", "walnut", "white", "wine", "yellow",
)  # fmt: skip

_STOPWORDS = frozenset(
    """a an the and or of for with without in on at to from by as is are be this that these
    those it its your our my you we they he she his her their them per each every any all
    some no not only very more most less than too so just into onto over under up down out
    about after before between both either neither nor can will""".split()
)
_ADJECTIVES = frozenset(
    """new best great good nice high low premium quality classic modern vintage cute pretty
    beautiful elegant soft hard small large big little mini long short tall wide narrow thin
    thick light dark heavy lightweight extra super ultra professional portable adjustable
    durable comfortable natural organic fresh pure healthy delicious sweet spicy hot cold
    warm cool dry wet easy simple smart wireless waterproof casual formal slim fit loose
    tight plus regular standard original real genuine perfect ideal unique multi double
    single triple full half quick fast slow old young daily everyday indoor outdoor
    """.split()
) | frozenset(COLOURS)
_ADJECTIVE_SUFFIXES = ("ful", "less", "able", "ible", "ous", "ish")
_WORD = re.compile(r"[a-z0-9]+")


def token_set_ratio(a: str, b: str) -> int:
    """``thefuzz.fuzz.token_set_ratio``: rapidfuzz's on processed strings, rounded."""
    return int(round(fuzz.token_set_ratio(a, b, processor=utils.default_process)))


def normalize_color(text: str) -> str:
    """The first colour word (in :data:`COLOURS` order) contained in ``text``, else ``text``."""
    for colour in COLOURS:
        if colour in text:
            return colour
    return text


def title_nouns(title: str) -> list[str]:
    """Approximate nouns of a product title (see the module docstring)."""
    nouns = []
    for word in _WORD.findall(title.lower()):
        if len(word) < 2 or any(c.isdigit() for c in word):
            continue
        if word in _STOPWORDS or word in _ADJECTIVES or word.endswith(_ADJECTIVE_SUFFIXES):
            continue
        nouns.append(word)
    return nouns


@dataclass(frozen=True)
class TypeMatch:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


@dataclass(frozen=True)
class RewardBreakdown:
    """The parts of the reward, for ``info["reward_breakdown"]``."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    attr_matches: int
    num_attrs: int
    option_matches: int
    num_options: int
    price_ok: bool
    total: float

    @property
    def success(self) -> bool:
        return self.total == 1.0


def type_reward(product: Product, goal: Goal) -> TypeMatch:
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = title_nouns(goal.name)
    if desired:
        title_score = len(set(title_nouns(product.name)) & set(desired)) / len(desired)
    else:
        title_score = 0.2
    r_type = 1.0 if (query_match or category_match or title_score > 0.2) else 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeMatch(r_type, query_match, category_match, title_score)


def attribute_matches(product: Product, goal: Goal) -> int:
    title = product.name.lower()
    bullets = " ".join(product.bullet_points).lower()
    description = product.description.lower()
    matches = 0
    for attr in goal.attributes:
        if any(token_set_ratio(p, attr) > FUZZY_THRESHOLD for p in product.attributes) or (
            attr in title or attr in bullets or attr in description
        ):
            matches += 1
    return matches


def option_matches(selected: Sequence[str], goal_options: Sequence[str]) -> int:
    chosen = [normalize_color(o) for o in selected]
    matches = 0
    for wanted in (normalize_color(o) for o in goal_options):
        if any(token_set_ratio(o, wanted) > FUZZY_THRESHOLD for o in chosen):
            matches += 1
    return matches


def get_reward(product: Product, goal: Goal, selected_options: Sequence[str]) -> RewardBreakdown:
    """WebShop's reward for buying ``product`` with ``selected_options`` (values) for ``goal``."""
    kind = type_reward(product, goal)
    attrs = attribute_matches(product, goal)
    options = option_matches(selected_options, goal.goal_options)
    price_ok = product.price <= goal.price_upper
    denominator = len(goal.attributes) + len(goal.goal_options) + 1
    total = kind.r_type * (attrs + options + int(price_ok)) / denominator
    return RewardBreakdown(
        r_type=kind.r_type,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
        attr_matches=attrs,
        num_attrs=len(goal.attributes),
        option_matches=options,
        num_options=len(goal.goal_options),
        price_ok=price_ok,
        total=total,
    )
