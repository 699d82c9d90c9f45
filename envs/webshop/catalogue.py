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
"""

from __future__ import annotations

import functools
import random

from envs.webshop.official import price_clause, sample_price_upper
from envs.webshop.schema import Catalogue, Goal, Product

PRODUCTS_PER_TYPE = 27
NUM_TEST_GOALS = 500

_ROOTS = {
    "beauty": "Beauty & Personal Care",
    "food": "Grocery & Gourmet Food",
    "fashion": "Clothing, Shoes & Jewelry",
    "furniture": "Home & Kitchen › Furniture",
    "electronics": "Electronics",
}

_BRANDS = {
    "beauty": "Lumera|Veloura|Aurelle|Botanix|Serenne|Glowbe|Purelle|Maison Nue|Kindra|Solavie|Dermaly|Olivique",
    "food": "Harvest Lane|Golden Acre|Nutriva|Bramble & Co|Old Mill|Sunpeak|Verdana Farms|Kettle Ridge|Pantry Bloom|Casa Oliva|Wildroot|Tidewater",
    "fashion": "Northwind|Urbano|Selvage|Kestrel|Marlowe|Tidepool|Ardent|Corvid|Lark & Lane|Ventura|Halden|Mistral",
    "furniture": "Oakhaven|Nordvik|Timberline|Casabella|Loftly|Hearthstone|Modulo|Birchwood|Urban Nest|Larkspur|Redfern|Kaiyo",
    "electronics": "Voltix|Sonara|Arcwave|Nexon|Pulsar|Quantix|Lumio|Zentro|Orbis|Kinetic|Auralink|Tekvo",
}

_COLORS = "black;white;navy blue;grey;red;beige;olive green;pink;brown;teal;burgundy;light blue"
_WOOD = "espresso;walnut;white oak;black;natural;grey wash;cherry"
_APPAREL = "x-small;small;medium;large;x-large"

# query | title noun | breadcrumb under the category root | variants | attributes | option groups | price range
# Option groups: "name=v1;v2;..." joined by "|". Attributes of a type never fuzzily
# match each other, nor do values of one option group (token_set_ratio <= 85).
_TYPES: dict[str, tuple[tuple[str, str, str, str, str, str, tuple[float, float]], ...]] = {
    "beauty": (
        (
            "shampoo",
            "Shampoo",
            "Hair Care › Shampoo",
            "Argan Oil|Tea Tree|Coconut|Biotin|Rosemary Mint|Charcoal",
            "sulfate free|paraben free|cruelty free|natural ingredients|color safe|dry scalp|vegan formula|hair growth",
            "size=8 fl oz;13.5 fl oz;33.8 fl oz;2 pack;travel size|scent=lavender;unscented;citrus;eucalyptus",
            (6, 38),
        ),
        (
            "hair conditioner",
            "Conditioner",
            "Hair Care › Conditioner",
            "Argan Oil|Shea Butter|Keratin|Avocado|Aloe Vera",
            "sulfate free|silicone free|cruelty free|damaged hair|curly hair|deep moisture|leave in|vegan formula",
            "size=8 fl oz;16 fl oz;33.8 fl oz|scent=coconut;vanilla;unscented;green tea",
            (7, 35),
        ),
        (
            "face moisturizer",
            "Face Moisturizer",
            "Skin Care › Face › Moisturizers",
            "Hyaluronic Acid|Vitamin C|Retinol|Niacinamide|Ceramide",
            "oil free|fragrance free|sensitive skin|spf 30|anti aging|non comedogenic|dermatologist tested|dark spots",
            "size=1.7 oz;2.5 oz;4 oz|style=day cream;night cream",
            (9, 60),
        ),
        (
            "lipstick",
            "Matte Lipstick",
            "Makeup › Lips › Lipstick",
            "Velvet|Satin|Creamy|Liquid|Long Wear",
            "long lasting|highly pigmented|cruelty free|transfer proof|moisturizing formula|paraben free",
            "color=ruby red;nude beige;berry;coral;mauve;plum|count=single;3 piece set",
            (5, 28),
        ),
        (
            "nail polish",
            "Nail Polish",
            "Makeup › Nails › Nail Polish",
            "Gel Effect|Quick Dry|Glitter|Chrome|Pastel",
            "quick drying|chip resistant|non toxic|high shine|vegan formula|cruelty free",
            "color=cherry red;baby pink;midnight blue;clear;lilac;gold shimmer|count=single;6 pack",
            (4, 22),
        ),
        (
            "body wash",
            "Body Wash",
            "Personal Care › Bath & Bathing › Body Washes",
            "Oatmeal|Honey|Sea Salt|Cocoa Butter|Cucumber",
            "sensitive skin|dermatologist tested|sulfate free|natural ingredients|paraben free|long lasting fragrance",
            "size=16 fl oz;22 fl oz;3 pack|scent=lavender;sandalwood;fresh linen;unscented",
            (5, 26),
        ),
        (
            "sunscreen lotion",
            "Sunscreen Lotion",
            "Skin Care › Sun › Sunscreens",
            "Mineral|Sport|Zinc Oxide|Sheer|Kids",
            "water resistant|reef safe|broad spectrum|oil free|fragrance free|sensitive skin",
            "size=3.4 fl oz;6 fl oz;2 pack|spf=spf 30;spf 50;spf 70",
            (8, 32),
        ),
        (
            "eyeshadow palette",
            "Eyeshadow Palette",
            "Makeup › Eyes › Eyeshadow",
            "Nude|Smoky|Sunset|Rose Gold|Jewel Tone",
            "highly pigmented|long lasting|cruelty free|blendable formula|travel friendly|paraben free",
            "color=warm neutrals;cool tones;bright shades;bronze",
            (9, 48),
        ),
        (
            "hair dryer",
            "Hair Dryer",
            "Hair Care › Styling Tools › Hair Dryers",
            "Ionic|Ceramic|Tourmaline|Compact|Salon",
            "fast drying|low noise|lightweight design|cool shot button|frizz control|foldable handle",
            f"color={_COLORS}|style=with diffuser;with concentrator",
            (19, 120),
        ),
    ),
    "food": (
        (
            "coffee beans",
            "Whole Bean Coffee",
            "Beverages › Coffee › Whole Coffee Beans",
            "Colombian|Ethiopian|Sumatra|Espresso|House Blend",
            "fair trade|usda organic|single origin|low acid|small batch|kosher certified",
            "size=12 ounce;2 pound;80 ounce|flavor=dark roast;medium roast;light roast",
            (9, 70),
        ),
        (
            "green tea",
            "Green Tea",
            "Beverages › Tea › Green Tea",
            "Matcha|Jasmine|Sencha|Mint|Lemon Ginger",
            "caffeine free|usda organic|non gmo|individually wrapped|gluten free|sugar free",
            "count=16 count;40 count;100 count|flavor=original;honey;peach",
            (4, 30),
        ),
        (
            "protein bars",
            "Protein Bars",
            "Snack Foods › Bars › Protein Bars",
            "Chocolate Peanut|Cookie Dough|Almond|Blueberry|Salted Caramel",
            "high protein|low sugar|gluten free|keto friendly|plant based|non gmo",
            "count=12 count;30 count;6 pack|flavor=chocolate;peanut butter;vanilla almond;berry",
            (12, 45),
        ),
        (
            "trail mix",
            "Trail Mix",
            "Snack Foods › Nuts & Trail Mix",
            "Tropical|Mountain|Energy|Sweet & Salty|Cranberry",
            "resealable bag|non gmo|no added sugar|high fiber|vegan snack|kosher certified",
            "size=10 ounce;26 ounce;3 pound|count=single;4 pack",
            (6, 35),
        ),
        (
            "olive oil",
            "Extra Virgin Olive Oil",
            "Pantry Staples › Cooking Oils › Olive Oil",
            "Italian|Greek|Spanish|California|Tuscan",
            "cold pressed|first cold extraction|usda organic|non gmo|glass bottle|kosher certified",
            "size=16.9 fl oz;25.3 fl oz;1 liter;1 gallon",
            (8, 55),
        ),
        (
            "hot sauce",
            "Hot Sauce",
            "Pantry Staples › Condiments › Hot Sauce",
            "Habanero|Chipotle|Sriracha|Ghost Pepper|Jalapeno",
            "gluten free|no preservatives|small batch|vegan sauce|low sodium|sugar free",
            "size=5 fl oz;12 fl oz;gift set|flavor=original;garlic;mango;smoky",
            (4, 25),
        ),
        (
            "dark chocolate",
            "Dark Chocolate Bar",
            "Snack Foods › Candy & Chocolate › Chocolate Bars",
            "Sea Salt|Raspberry|Orange|Almond|Espresso",
            "fair trade|non gmo|dairy free|individually wrapped|soy free|low sugar",
            "count=single;6 pack;12 pack|flavor=extra dark;mint;caramel",
            (3, 40),
        ),
        (
            "gluten free pasta",
            "Gluten Free Pasta",
            "Pantry Staples › Pasta & Noodles",
            "Brown Rice|Chickpea|Red Lentil|Quinoa|Corn",
            "high protein|non gmo|plant based|kosher certified|high fiber|usda organic",
            "style=penne;spaghetti;fusilli;elbows|count=single;6 pack",
            (3, 30),
        ),
        (
            "beef jerky",
            "Beef Jerky",
            "Snack Foods › Jerky & Dried Meats",
            "Teriyaki|Peppered|Sweet & Spicy|Original|Hickory",
            "high protein|low fat|gluten free|no msg|grass fed|resealable bag",
            "size=2.85 ounce;10 ounce;3 pack|flavor=original;teriyaki;black pepper;sweet chili",
            (6, 40),
        ),
    ),
    "fashion": (
        (
            "men's running shoes",
            "Men's Running Shoes",
            "Men › Shoes › Athletic › Running",
            "Trail|Road|Lightweight|Cushioned|Knit",
            "non slip|breathable mesh|arch support|memory foam|rubber sole|lace up",
            f"size=8;9;10;11;12;13|color={_COLORS}",
            (35, 140),
        ),
        (
            "women's yoga pants",
            "Women's Yoga Pants",
            "Women › Clothing › Active › Leggings",
            "High Waist|Flare|Capri|Pocket|Seamless",
            "moisture wicking|tummy control|four way stretch|squat proof|machine wash|side pockets",
            f"size={_APPAREL}|color={_COLORS}",
            (15, 45),
        ),
        (
            "men's t-shirt",
            "Men's Crew Neck T-Shirt",
            "Men › Clothing › Shirts › T-Shirts",
            "Classic|Slim Fit|Heavyweight|Pocket|Vintage",
            "cotton jersey|tagless label|machine wash|short sleeve|relaxed fit|wrinkle free",
            f"size={_APPAREL}|color={_COLORS}|count=single;3 pack",
            (8, 30),
        ),
        (
            "winter jacket",
            "Winter Jacket",
            "Women › Clothing › Coats, Jackets & Vests",
            "Puffer|Parka|Quilted|Hooded|Down",
            "water resistant|faux fur hood|zip closure|insulated lining|packable design|machine wash",
            f"size={_APPAREL}|color={_COLORS}",
            (45, 190),
        ),
        (
            "leather wallet",
            "Leather Wallet",
            "Men › Accessories › Wallets",
            "Bifold|Trifold|Slim|Minimalist|Card Holder",
            "rfid blocking|genuine leather|gift box|coin pocket|id window",
            "color=black;brown;tan;navy blue|style=bifold;trifold",
            (12, 60),
        ),
        (
            "polarized sunglasses",
            "Polarized Sunglasses",
            "Men › Accessories › Sunglasses",
            "Aviator|Wayfarer|Round|Sport|Square",
            "uv protection|polarized lens|lightweight frame|scratch resistant|spring hinge",
            "color=black;tortoise;gold;silver|lens=grey;green;mirror blue",
            (10, 80),
        ),
        (
            "women's summer dress",
            "Women's Summer Dress",
            "Women › Clothing › Dresses › Casual",
            "Floral|Wrap|Maxi|Boho|Midi",
            "v neck|short sleeve|flowy fit|hand wash|side pockets|smocked waist",
            f"size={_APPAREL}|color=floral blue;black;white;yellow;red print",
            (18, 55),
        ),
        (
            "wool socks",
            "Wool Socks",
            "Men › Clothing › Socks",
            "Hiking|Crew|Thermal|Cushioned|Boot",
            "merino wool|moisture wicking|odor resistant|arch support|reinforced heel",
            "size=small;medium;large|count=3 pairs;10 pairs|color=grey;black;assorted",
            (10, 40),
        ),
        (
            "canvas backpack",
            "Canvas Backpack",
            "Luggage & Travel Gear › Backpacks",
            "Rucksack|Laptop|Vintage|Travel|Daypack",
            "water resistant|laptop sleeve|padded straps|usb charging port|anti theft pocket",
            "color=khaki;black;army green;coffee;navy blue",
            (22, 75),
        ),
    ),
    "furniture": (
        (
            "office chair",
            "Office Chair",
            "Home Office Furniture › Desk Chairs",
            "Ergonomic|Mesh|Gaming|Executive|Task",
            "lumbar support|adjustable height|swivel wheels|padded armrests|breathable mesh|easy assembly",
            "color=black;grey;white;blue|style=high back;mid back",
            (60, 280),
        ),
        (
            "bookshelf",
            "Bookshelf",
            "Living Room Furniture › Bookcases",
            "5 Tier|Ladder|Corner|Industrial|Cube",
            "easy assembly|solid wood|metal frame|wall anchor|space saving|open shelves",
            f"color={_WOOD}|size=3 tier;5 tier",
            (45, 210),
        ),
        (
            "coffee table",
            "Coffee Table",
            "Living Room Furniture › Tables › Coffee Tables",
            "Lift Top|Round|Rustic|Glass Top|Mid Century",
            "storage shelf|easy assembly|solid wood|tempered glass|living room|rounded corners",
            f"color={_WOOD}",
            (55, 260),
        ),
        (
            "platform bed frame",
            "Platform Bed Frame",
            "Bedroom Furniture › Beds & Frames",
            "Metal|Upholstered|Wooden|Low Profile|Storage",
            "no box spring needed|under bed storage|noise free|easy assembly|wood slat support|headboard included",
            f"size=twin;full;queen;king|color={_WOOD}",
            (110, 420),
        ),
        (
            "nightstand",
            "Nightstand",
            "Bedroom Furniture › Nightstands",
            "2 Drawer|Floating|Rattan|Modern|Farmhouse",
            "charging station|storage drawer|easy assembly|solid wood|bedroom furniture",
            f"color={_WOOD}|count=single;set of 2",
            (35, 160),
        ),
        (
            "bar stool",
            "Bar Stool",
            "Dining Room Furniture › Bar Stools",
            "Swivel|Counter Height|Backless|Saddle|Industrial",
            "adjustable height|swivel seat|footrest ring|faux leather|easy assembly",
            "color=black;brown;grey;white|count=single;pair;set of 4",
            (40, 230),
        ),
        (
            "tv stand",
            "TV Stand",
            "Living Room Furniture › TV & Media Furniture",
            "Farmhouse|Corner|Floating|Mid Century|Entertainment Center",
            "cable management|storage shelf|easy assembly|sliding barn door|led lights",
            f"color={_WOOD}|size=43 inch;58 inch;70 inch",
            (70, 320),
        ),
        (
            "shoe rack",
            "Shoe Rack",
            "Entryway Furniture › Shoe Organizers",
            "Bamboo|Metal|Stackable|Bench|Narrow",
            "space saving|easy assembly|stackable design|water resistant|entryway storage",
            "color=natural;black;white|size=3 tier;4 tier;6 tier",
            (18, 85),
        ),
        (
            "futon sofa",
            "Futon Sofa Bed",
            "Living Room Furniture › Sofas & Couches › Futons",
            "Convertible|Tufted|Loveseat|Sleeper|Velvet",
            "convertible design|memory foam|solid wood legs|easy assembly|removable cover",
            "color=grey;navy blue;beige;dark green;black",
            (140, 480),
        ),
    ),
    "electronics": (
        (
            "wireless earbuds",
            "Wireless Earbuds",
            "Headphones › Earbud Headphones",
            "Bluetooth 5.3|Sport|Hybrid|Mini|Pro",
            "noise cancelling|water resistant|long battery life|charging case|touch control|hands free calling",
            "color=black;white;navy blue;rose gold",
            (19, 130),
        ),
        (
            "phone case",
            "Phone Case",
            "Cell Phones & Accessories › Cases",
            "Clear|Rugged|Slim|Wallet|Silicone",
            "shockproof protection|wireless charging compatible|card holder|raised edges|anti yellowing",
            "model=iphone 15;galaxy s24;pixel 8;moto g|color=clear;black;purple;blue",
            (7, 35),
        ),
        (
            "usb c cable",
            "USB C Cable",
            "Computers & Accessories › Cables › USB Cables",
            "Braided|Short|Right Angle|Coiled|Thunderbolt",
            "fast charging|braided nylon|data transfer|durable connector|tangle free",
            "size=3 ft;6 ft;10 ft|count=single;3 pack",
            (6, 28),
        ),
        (
            "bluetooth speaker",
            "Bluetooth Speaker",
            "Portable Audio & Video › Speakers",
            "Portable|Waterproof|Outdoor|Mini|Party",
            "waterproof design|long battery life|deep bass|stereo pairing|built in microphone",
            "color=black;blue;red;camo green",
            (22, 160),
        ),
        (
            "hdmi cable",
            "HDMI Cable",
            "Television & Video › Accessories › Cables",
            "4K|8K|Slim|Braided|Ultra",
            "high speed|gold plated|ethernet support|braided cord|dolby vision",
            "size=3 ft;6 ft;15 ft|count=single;2 pack",
            (6, 30),
        ),
        (
            "power bank",
            "Portable Power Bank",
            "Cell Phones & Accessories › Chargers & Power Adapters",
            "Slim|Magnetic|Solar|Compact|Ultra",
            "fast charging|led display|dual usb ports|lightweight design|airline approved",
            "capacity=10000mah;26800mah|color=black;white;blue",
            (16, 70),
        ),
        (
            "laptop stand",
            "Laptop Stand",
            "Computers & Accessories › Laptop Accessories › Stands",
            "Aluminum|Adjustable|Foldable|Ergonomic|Vertical",
            "height adjustable|heat dissipation|non slip pads|portable design|aluminum alloy",
            "color=silver;space grey;black",
            (15, 65),
        ),
        (
            "wireless mouse",
            "Wireless Mouse",
            "Computers & Accessories › Keyboards, Mice & Accessories › Mice",
            "Ergonomic|Silent|Vertical|Travel|Gaming",
            "silent click|rechargeable battery|adjustable dpi|plug and play|ergonomic design",
            "color=black;grey;white;pink",
            (9, 60),
        ),
        (
            "hd webcam",
            "HD Webcam",
            "Computers & Accessories › Webcams",
            "1080p|4K|Streaming|Wide Angle|Privacy",
            "built in microphone|auto focus|privacy cover|plug and play|low light correction",
            "color=black;white|style=with tripod;clip mount",
            (20, 110),
        ),
    ),
}

_STARTS = (
    "i need",
    "i'm looking for",
    "i want",
    "find me",
    "i am looking for",
    "can you get me",
    "i would like",
)
_REVIEWS = (
    "works exactly as described, would buy this {noun} again.",
    "good quality for the price.",
    "arrived quickly and well packaged.",
    "not bad, but a little smaller than i expected.",
    "my second {noun} from this brand and still happy.",
    "does the job. nothing fancy.",
    "great value, the {attr} part is true.",
    "returned it, it was not for me.",
)


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
    products = []
    asins: set[str] = set()
    for category, types in _TYPES.items():
        brands = _BRANDS[category].split("|")
        for query, noun, crumb, variants, attrs, option_spec, (lo, hi) in types:
            pool = attrs.split("|")
            groups = {g.split("=")[0]: g.split("=")[1].split(";") for g in option_spec.split("|")}
            for _ in range(PRODUCTS_PER_TYPE):
                asin = _asin(rng, asins)
                brand, variant = rng.choice(brands), rng.choice(variants.split("|"))
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
                        product_category=f"{_ROOTS[category]} › {crumb}",
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
                            for r in rng.sample(_REVIEWS, rng.randint(2, 4))
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


def _options(groups: dict[str, list[str]], rng: random.Random) -> dict[str, tuple[str, ...]]:
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
                rng.choice(_STARTS),
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
