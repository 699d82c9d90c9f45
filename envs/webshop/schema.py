"""WebShop's data, as the engine uses it: products and goals.

Field names follow WebShop's processed product records and its goal records
(``web_agent_site/engine``), so the official files map onto them one to one
(:mod:`envs.webshop.official`) and our synthetic catalogue
(:mod:`envs.webshop.catalogue`) is produced directly in this shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Product:
    asin: str
    name: str  # the title shown on result and item pages
    category: str  # one of WebShop's five: beauty, food, fashion, furniture, electronics
    product_category: str  # breadcrumb, levels joined by " › "
    query: str  # the search query the product was scraped under (WebShop's type signal)
    price: float  # the price listed (WebShop shows a range for some; we keep one number)
    description: str = ""
    bullet_points: tuple[str, ...] = ()  # "Features" page
    attributes: tuple[str, ...] = ()  # WebShop's mined attributes (items_ins_v2), lower case
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)  # option group -> values, e.g. {"size": ("small", ...)}
    reviews: tuple[str, ...] = ()
    rating: float | None = None


@dataclass(frozen=True)
class Goal:
    """One task: buy the product ``asin`` (or any product that satisfies the instruction)."""

    goal_id: int
    asin: str
    category: str
    query: str
    name: str
    product_category: str
    instruction_text: str
    attributes: tuple[str, ...]  # attributes the bought product must have
    goal_options: tuple[str, ...]  # option values that must be selected, e.g. ("large", "navy blue")
    price_upper: float  # the price limit stated in the instruction


@dataclass(frozen=True)
class Catalogue:
    products: tuple[Product, ...]
    goals: tuple[Goal, ...]
    train_goals: tuple[int, ...]  # goal_ids
    test_goals: tuple[int, ...]
    dev_goals: tuple[int, ...] = ()  # WebShop's tuning split (official files); none in the synthetic catalogue
    source: str = "synthetic"  # "synthetic" or "official"
