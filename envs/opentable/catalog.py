"""The booking site's generated world: restaurants, the calendar and availability.

Everything here is a pure function of ``seed``: the same catalogue (names,
neighbourhoods, sold-out slots) comes back in every process, so task ids, site
pages and the judge agree across runs. The site loads a catalogue into its
SQLite store (:mod:`envs.opentable.site`); tasks are drawn from it
(:mod:`envs.opentable.tasks`).

The site has its own fixed "today" (:data:`TODAY`), never the machine's clock,
so a task's date means the same page on any day it is run.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass

TODAY = dt.date(2025, 6, 2)  # a Monday; the site books TODAY .. TODAY + DAYS - 1
DAYS = 30
# Dinner service: 5:00 PM to 10:00 PM every 30 minutes, as minutes after midnight.
TIMES = tuple(range(17 * 60, 22 * 60 + 1, 30))
DEFAULT_TIME = 19 * 60
DEFAULT_PARTY = 2
MAX_PARTY = 12  # the party-size picker's range; each restaurant has its own limit
# Slots shown around the requested time on a restaurant page (minutes).
SLOT_WINDOW = 60

_CUISINES = {
    "Italian": (
        ["Trattoria", "Osteria", "Cucina"],
        ["Lucia", "Bruno", "Aldo", "Marisa", "Vento", "Sole"],
    ),
    "French": (
        ["Bistro", "Brasserie", "Chez"],
        ["Margot", "Colette", "Lucien", "Amelie", "Renard"],
    ),
    "Japanese": (["Sushi", "Izakaya", "Robata"], ["Ren", "Hana", "Kaito", "Mori", "Sora"]),
    "Mexican": (["Taqueria", "Cantina", "Cocina"], ["Sol", "Luna", "Paloma", "Jalisco", "Oaxaca"]),
    "Indian": (["Tandoor", "Masala", "Spice"], ["Palace", "Garden", "House", "Route", "Kitchen"]),
    "Thai": (["Baan", "Thai", "Lotus"], ["Siam", "Orchid", "Basil", "Chili", "Khao"]),
    "Greek": (
        ["Taverna", "Estiatorio", "Kouzina"],
        ["Eleni", "Nikos", "Ithaca", "Kyma", "Santorini"],
    ),
    "Steakhouse": (
        ["The", "Prime", "Red"],
        ["Ember", "Cleaver", "Chophouse", "Smokehouse", "Iron"],
    ),
    "Seafood": (["The", "Harbor", "Pier"], ["Oyster Bar", "Anchor", "Catch", "Tide", "Clam Shack"]),
    "American": (
        ["The", "Copper", "Golden"],
        ["Fig", "Lantern", "Table", "Kettle", "Hearth", "Barrel"],
    ),
}
_OWNERS = ("Lucia", "Bruno", "Margot", "Colette", "Hana", "Paloma", "Eleni", "Nikos")
_NEIGHBOURHOODS = (
    "North Beach", "Mission", "SoMa", "Hayes Valley", "Marina", "Castro",
    "Nob Hill", "Richmond", "Sunset", "Dogpatch", "Chinatown", "Embarcadero",
)  # fmt: skip
_STREETS = ("Columbus Ave", "Valencia St", "Folsom St", "Hayes St", "Chestnut St", "Castro St",
            "Hyde St", "Clement St", "Irving St", "3rd St", "Grant Ave", "Steuart St")  # fmt: skip
_DISHES = {
    "Italian": ["Cacio e pepe", "Burrata with peaches", "Osso buco", "Tiramisu"],
    "French": ["Steak frites", "French onion soup", "Duck confit", "Creme brulee"],
    "Japanese": ["Omakase nigiri", "Chicken tsukune", "Miso black cod", "Matcha panna cotta"],
    "Mexican": ["Tacos al pastor", "Mole negro", "Elote", "Churros"],
    "Indian": ["Butter chicken", "Lamb rogan josh", "Garlic naan", "Gulab jamun"],
    "Thai": ["Khao soi", "Green papaya salad", "Pad see ew", "Mango sticky rice"],
    "Greek": ["Grilled octopus", "Moussaka", "Spanakopita", "Baklava"],
    "Steakhouse": ["Dry-aged ribeye", "Creamed spinach", "Wedge salad", "Chocolate cake"],
    "Seafood": ["Raw oysters", "Cioppino", "Lobster roll", "Key lime pie"],
    "American": ["Smash burger", "Roast chicken", "Mac and cheese", "Apple pie"],
}
_REVIEWERS = (
    "Dana K.",
    "Marco P.",
    "Priya S.",
    "Tom W.",
    "Aiko M.",
    "Luis G.",
    "Nora B.",
    "Sam O.",
)
_REVIEW_LINES = (
    "Great service and the food came out fast.",
    "Lovely spot for a birthday dinner, we will be back.",
    "A bit loud on a Friday night but worth it.",
    "The dessert alone is worth the trip.",
    "Cozy room, friendly staff, generous portions.",
    "Booked last minute and they still found us a table.",
)  # fmt: skip


@dataclass(frozen=True)
class Restaurant:
    id: int
    slug: str
    name: str
    cuisine: str
    neighbourhood: str
    address: str
    price: int  # 1-4, shown as "$" .. "$$$$"
    rating: float
    reviews: int
    max_party: int
    description: str
    dishes: tuple[str, ...]
    review_texts: tuple[tuple[str, str], ...]  # (reviewer, text)


@dataclass(frozen=True)
class Catalog:
    """Restaurants and the sold-out slots ``(restaurant_id, date ISO, minutes)``."""

    seed: int
    restaurants: tuple[Restaurant, ...]
    sold_out: frozenset[tuple[int, str, int]]

    def is_available(self, restaurant_id: int, day: dt.date, minutes: int, party: int) -> bool:
        restaurant = self.restaurants[restaurant_id]
        return (
            party <= restaurant.max_party
            and minutes in TIMES
            and day in dates()
            and (restaurant_id, day.isoformat(), minutes) not in self.sold_out
        )


def dates() -> tuple[dt.date, ...]:
    return tuple(TODAY + dt.timedelta(days=i) for i in range(DAYS))


def date_label(day: dt.date) -> str:
    """``Saturday, June 14``: the wording of both the date picker and the tasks."""
    return f"{day:%A}, {day:%B} {day.day}"


def time_label(minutes: int) -> str:
    """``7:30 PM``."""
    hour, minute = divmod(minutes, 60)
    return f"{(hour - 1) % 12 + 1}:{minute:02d} {'AM' if hour < 12 else 'PM'}"


def party_label(party: int) -> str:
    return "1 person" if party == 1 else f"{party} people"


def price_label(price: int) -> str:
    return "$" * price


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def build_catalog(seed: int = 0, num_restaurants: int = 80) -> Catalog:
    """Generate ``num_restaurants`` restaurants (unique names) and their sold-out slots."""
    rng = random.Random(f"opentable-catalog-{seed}")
    names: set[str] = set()
    drafts: list[tuple[str, str]] = []
    cuisines = sorted(_CUISINES)
    while len(drafts) < num_restaurants:
        cuisine = rng.choice(cuisines)
        prefixes, words = _CUISINES[cuisine]
        name = f"{rng.choice(prefixes)} {rng.choice(words)}"
        if (
            rng.random() < 0.15
        ):  # "Lucia's Kitchen" next to "Trattoria Lucia": near misses in search
            name = f"{rng.choice(_OWNERS)}'s Kitchen"
        if name in names or slugify(name) in {slugify(n) for n in names}:
            continue
        names.add(name)
        drafts.append((name, cuisine))

    restaurants = []
    for i, (name, cuisine) in enumerate(drafts):
        neighbourhood = rng.choice(_NEIGHBOURHOODS)
        street = _STREETS[_NEIGHBOURHOODS.index(neighbourhood)]
        dishes = tuple(rng.sample(_DISHES[cuisine], 3))
        restaurants.append(
            Restaurant(
                id=i,
                slug=slugify(name),
                name=name,
                cuisine=cuisine,
                neighbourhood=neighbourhood,
                address=f"{rng.randint(10, 2999)} {street}, San Francisco",
                price=rng.choice((1, 2, 2, 3, 3, 4)),
                rating=round(rng.uniform(3.6, 4.9), 1),
                reviews=rng.randint(40, 2400),
                max_party=rng.choice((6, 8, 8, 10, 12)),
                description=(
                    f"{name} serves {cuisine.lower()} food in {neighbourhood}. "
                    f"Known for the {dishes[0].lower()}."
                ),
                dishes=dishes,
                review_texts=tuple(
                    (rng.choice(_REVIEWERS), line) for line in rng.sample(_REVIEW_LINES, 2)
                ),
            )
        )

    sold_out = set()
    for restaurant in restaurants:
        # Popular places sell out more: 15-45% of their slots.
        busy = 0.15 + 0.3 * (restaurant.rating - 3.6) / 1.3
        for day in dates():
            for t in TIMES:
                if rng.random() < busy:
                    sold_out.add((restaurant.id, day.isoformat(), t))
    return Catalog(seed=seed, restaurants=tuple(restaurants), sold_out=frozenset(sold_out))
