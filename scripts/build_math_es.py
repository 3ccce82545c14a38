"""Build Aura's Spanish math set (aura/resources/math_es/): grade-school word problems with verified answers.

Every problem is written from a template of this file (no text is copied from any other collection): a
situation with varied names, places, objects, units and euros, numbers drawn with a fixed seed, and the
answer computed twice: once by the template's own arithmetic (exact fractions) and once by evaluating the
worked solution's expression with a separate evaluator. A problem whose two answers differ, whose answer
is not positive or has more than two decimals, or whose text repeats another's is not kept. Answers are
written the Spanish way (decimal comma: ``12,5``). No train problem shares a 13-gram with a test problem (the
contamination check of ``aura.data.contamination``; ``build``).

    python scripts/build_math_es.py          # rewrite train.jsonl and test.jsonl
    python scripts/build_math_es.py --check  # fail if the files differ from what the templates give

Records: ``{"id", "prompt", "answer", "solution", "template"}``; ``aura finetune --objective grpo`` reads
``prompt`` and ``answer`` (the ``exact-answer`` reward), ``aura eval --suite aura-es`` scores the test split.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aura.data.contamination: the check the split is made clean for
OUT = ROOT / "aura" / "resources" / "math_es"
SEED, TOTAL, TEST = 20261125, 640, 140
INSTRUCTION = "Resuelve el problema paso a paso y termina con una línea «Respuesta: N», donde N es solo el número."

NAMES = [
    "Lucía",
    "Mateo",
    "Sofía",
    "Hugo",
    "Martina",
    "Daniel",
    "Valentina",
    "Pablo",
    "Camila",
    "Diego",
    "Alba",
    "Javier",
    "Paula",
    "Andrés",
    "Carmen",
    "Tomás",
    "Elena",
    "Joaquín",
    "Noelia",
    "Rodrigo",
    "Ximena",
    "Álvaro",
    "Irene",
    "Santiago",
    "Aitana",
    "Gonzalo",
    "Renata",
    "Iker",
    "Nerea",
    "Emilio",
    "Guadalupe",
    "Marcos",
    "Inés",
    "Julián",
    "Rocío",
    "Bruno",
    "Lorena",
    "Adrián",
    "Marina",
    "Nicolás",
]
PLACES = [
    "Sevilla",
    "Valencia",
    "Bilbao",
    "Zaragoza",
    "Granada",
    "Salamanca",
    "Oviedo",
    "Córdoba",
    "Málaga",
    "Alicante",
    "Pamplona",
    "Cádiz",
    "Toledo",
    "Murcia",
    "Santander",
    "Girona",
    "Lugo",
    "Cáceres",
]
# (singular, plural, price range in cents)
GOODS = [
    ("cuaderno", "cuadernos", (120, 450)),
    ("bolígrafo", "bolígrafos", (40, 180)),
    ("barra de pan", "barras de pan", (70, 160)),
    ("kilo de naranjas", "kilos de naranjas", (90, 250)),
    ("entrada de cine", "entradas de cine", (500, 950)),
    ("libro", "libros", (800, 2400)),
    ("camiseta", "camisetas", (600, 1800)),
    ("botella de agua", "botellas de agua", (40, 120)),
    ("caja de galletas", "cajas de galletas", (150, 390)),
    ("maceta", "macetas", (250, 900)),
    ("billete de autobús", "billetes de autobús", (110, 260)),
    ("helado", "helados", (150, 350)),
]
CONTAINERS = [
    ("caja", "cajas", "lápices"),
    ("bolsa", "bolsas", "caramelos"),
    ("paquete", "paquetes", "cromos"),
    ("bandeja", "bandejas", "magdalenas"),
    ("estuche", "estuches", "rotuladores"),
    ("cesta", "cestas", "manzanas"),
]


# ---------------------------------------------------------------------------------------------------
# Numbers


def es(x: Fraction) -> str:
    """A Spanish number: decimal comma, at most two decimals, no thousands separator."""
    if x.denominator == 1:
        return str(x.numerator)
    text = f"{float(x):.2f}".rstrip("0").rstrip(".")
    return text.replace(".", ",")


def euros(cents: int) -> str:
    """Money as written on a price tag: two decimals when there are cents (``2,80 €``)."""
    return f"{cents // 100},{cents % 100:02d} €" if cents % 100 else f"{cents // 100} €"


def two_decimals(x: Fraction) -> bool:
    return (x * 100).denominator == 1


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def evaluate(expression: str) -> Fraction:
    """The value of an arithmetic expression (+ - * / and parentheses; Spanish decimals allowed) with exact
    fractions: the second, independent computation of every answer."""

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return Fraction(node.value)
        raise ValueError(f"unsupported expression: {expression}")

    python = expression.replace("×", "*").replace("÷", "/")
    # every number becomes an exact decimal string literal ("2,5" -> Fraction("2.5"))
    out, i = [], 0
    while i < len(python):
        if python[i].isdigit():
            j = i
            while j < len(python) and (
                python[j].isdigit() or (python[j] == "," and j + 1 < len(python) and python[j + 1].isdigit())
            ):
                j += 1
            out.append(repr(python[i:j].replace(",", ".")))
            i = j
        else:
            out.append(python[i])
            i += 1
    return walk(ast.parse("".join(out), mode="eval"))


# ---------------------------------------------------------------------------------------------------
# Templates: each returns (problem text, answer, solution expression, solution text)


def t_change(r: random.Random):
    name = r.choice(NAMES)
    sing, plur, (lo, hi) = r.choice(GOODS)
    n, price = r.randint(2, 6), r.randrange(lo, hi, 5)
    bill = next(b for b in (500, 1000, 2000, 5000, 10000, 20000) if b > n * price)
    text = (
        f"{name} compra {n} {plur} a {euros(price)} cada uno y paga con un billete de {euros(bill)}. "
        f"¿Cuántos euros le devuelven?"
    )
    if sing.startswith(("barra", "caja", "camiseta", "botella", "maceta", "entrada")):
        text = text.replace("cada uno", "cada una")
    expr = f"{es(Fraction(bill, 100))} - {n} × {es(Fraction(price, 100))}"
    return (
        text,
        Fraction(bill - n * price, 100),
        expr,
        "Gasta el número de unidades por el precio y lo resta del billete",
    )


def t_total(r: random.Random):
    name = r.choice(NAMES)
    (s1, p1, (lo1, hi1)), (s2, p2, (lo2, hi2)) = r.sample(GOODS, 2)
    a, b = r.randint(2, 5), r.randint(1, 4)
    c1, c2 = r.randrange(lo1, hi1, 5), r.randrange(lo2, hi2, 5)
    first = f"{a} {p1}" if a > 1 else f"1 {s1}"
    second = f"{b} {p2}" if b > 1 else f"un{'a' if s2.split()[0].endswith('a') else ''} {s2}"
    text = (
        f"En una tienda de {r.choice(PLACES)}, {name} compra {first} a {euros(c1)} la unidad y {second} a "
        f"{euros(c2)} la unidad. ¿Cuánto paga en total, en euros?"
    )
    expr = f"{a} × {es(Fraction(c1, 100))} + {b} × {es(Fraction(c2, 100))}"
    return text, Fraction(a * c1 + b * c2, 100), expr, "Suma lo que cuesta cada producto"


def t_share(r: random.Random):
    names = r.sample(NAMES, 3)
    people = r.randint(2, 8)
    each = r.randrange(150, 3000, 25)
    total = each * people
    what = r.choice(["la cena", "un regalo", "el alquiler de una barca", "las entradas del museo", "la gasolina"])
    text = (
        f"{names[0]}, {names[1]}, {names[2]} y sus amigos, {people} personas en total, pagan {what} a partes "
        f"iguales. Si cuesta {euros(total)}, ¿cuántos euros paga cada persona?"
    )
    return (
        text,
        Fraction(total, 100 * people),
        f"{es(Fraction(total, 100))} ÷ {people}",
        "Divide el total entre las personas",
    )


def t_speed(r: random.Random):
    name = r.choice(NAMES)
    a, b = r.sample(PLACES, 2)
    speed, half_hours = r.choice([60, 70, 80, 90, 100, 110, 120]), r.randint(2, 9)
    hours = Fraction(half_hours, 2)
    vehicle = r.choice(["en coche", "en autobús", "en tren"])
    if r.random() < 0.5:
        text = (
            f"{name} viaja {vehicle} de {a} a {b} a una velocidad media de {speed} km/h durante {es(hours)} "
            f"horas. ¿Cuántos kilómetros recorre?"
        )
        return text, speed * hours, f"{speed} × {es(hours)}", "Distancia = velocidad × tiempo"
    km = speed * hours
    text = (
        f"La distancia entre {a} y {b} es de {es(km)} km. Si {name} va {vehicle} a {speed} km/h de media, "
        f"¿cuántas horas tarda?"
    )
    return text, hours, f"{es(km)} ÷ {speed}", "Tiempo = distancia ÷ velocidad"


def t_discount(r: random.Random):
    name = r.choice(NAMES)
    item = r.choice(["una chaqueta", "unas zapatillas", "una bicicleta", "una mochila", "un abrigo", "una lámpara"])
    price = r.randrange(20, 300, 5)
    pct = r.choice([10, 15, 20, 25, 30, 40, 50])
    text = (
        f"{item.capitalize()} cuesta {price} €. En las rebajas tiene un descuento del {pct} %. "
        f"¿Cuántos euros paga {name} por {item}?"
    )
    return text, Fraction(price * (100 - pct), 100), f"{price} - {price} × {pct} ÷ 100", "Resta el descuento al precio"


def t_recipe(r: random.Random):
    ingredient, unit = r.choice(
        [
            ("harina", "gramos"),
            ("azúcar", "gramos"),
            ("leche", "mililitros"),
            ("arroz", "gramos"),
            ("tomate triturado", "gramos"),
        ]
    )
    dish = r.choice(["un bizcocho", "una paella", "unas natillas", "un gazpacho", "unas croquetas"])
    base = r.choice([2, 4, 6])
    qty = r.randrange(50, 600, 10)
    target = r.choice([n for n in (1, 2, 3, 4, 5, 6, 8, 10, 12) if n != base and two_decimals(Fraction(qty * n, base))])
    text = (
        f"La receta de {dish} para {base} personas lleva {qty} {unit} de {ingredient}. "
        f"¿Cuántos {unit} de {ingredient} hacen falta para {target} personas?"
    )
    return (
        text,
        Fraction(qty * target, base),
        f"{qty} ÷ {base} × {target}",
        "Calcula la cantidad por persona y multiplica",
    )


def t_garden(r: random.Random):
    name = r.choice(NAMES)
    length, width = r.randint(4, 30), r.randint(3, 20)
    if r.random() < 0.5:
        text = (
            f"El huerto rectangular de {name} mide {length} m de largo y {width} m de ancho. "
            "¿Cuál es su área en metros cuadrados?"
        )
        return text, Fraction(length * width), f"{length} × {width}", "Área = largo × ancho"
    price = r.choice([2, 3, 4, 5, 6, 8])
    text = (
        f"{name} quiere vallar un jardín rectangular de {length} m por {width} m. La valla cuesta {price} € "
        f"el metro. ¿Cuántos euros cuesta vallar todo el jardín?"
    )
    return (
        text,
        Fraction(2 * (length + width) * price),
        f"2 × ({length} + {width}) × {price}",
        "Perímetro por precio del metro",
    )


def t_savings(r: random.Random):
    name = r.choice(NAMES)
    weekly, weeks, spent = r.randrange(3, 25), r.randint(4, 20), 0
    weekly_c = weekly * 100 + r.choice([0, 0, 50, 25, 75])
    spent = r.randrange(5, max(6, weekly_c * weeks // 200))
    thing = r.choice(
        ["un videojuego", "un balón", "unos auriculares", "un libro de cómics", "una entrada de concierto"]
    )
    text = (
        f"{name} ahorra {euros(weekly_c)} cada semana durante {weeks} semanas y después gasta {spent} € en "
        f"{thing}. ¿Cuántos euros le quedan?"
    )
    return (
        text,
        Fraction(weekly_c * weeks, 100) - spent,
        f"{es(Fraction(weekly_c, 100))} × {weeks} - {spent}",
        "Ahorro total menos el gasto",
    )


def t_ages(r: random.Random):
    a, b = r.sample(NAMES, 2)
    young, diff = r.randint(5, 40), r.randint(2, 30)
    years = r.randint(2, 15)
    text = (
        f"{a} tiene {young} años y {b} tiene {diff} años más que {a}. ¿Cuántos años sumarán entre los dos "
        f"dentro de {years} años?"
    )
    return (
        text,
        Fraction(young + young + diff + 2 * years),
        f"{young} + ({young} + {diff}) + 2 × {years}",
        "Edad de cada uno dentro de esos años, sumadas",
    )


def t_liquids(r: random.Random):
    name = r.choice(NAMES)
    size = r.choice([Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(3, 4), Fraction(3, 2), Fraction(2)])
    ml = size * 1000
    n = r.randint(3, 12)
    if not two_decimals(ml * n / 1000) or ml.denominator != 1:
        ml, size = Fraction(250), Fraction(1, 4)
    drink = r.choice(["zumo", "agua", "leche", "limonada", "horchata"])
    text = (
        f"Para una fiesta en {r.choice(PLACES)}, {name} compra {n} botellas de {drink} de {es(ml)} mililitros "
        f"cada una. ¿Cuántos litros de {drink} compra en total?"
    )
    return text, ml * n / 1000, f"{n} × {es(ml)} ÷ 1000", "Mililitros totales pasados a litros"


def t_packs(r: random.Random):
    name, friend = r.sample(NAMES, 2)
    cont, conts, items = r.choice(CONTAINERS)
    per, packs = r.randint(4, 24), r.randint(2, 9)
    given = r.randint(1, per * packs - 1)
    text = (
        f"{name} tiene {packs} {conts} con {per} {items} en cada {cont}. Le regala {given} {items} a "
        f"{friend}. ¿Cuántos {items} le quedan a {name}?"
    )
    return text, Fraction(packs * per - given), f"{packs} × {per} - {given}", "Total menos lo que regala"


def t_average(r: random.Random):
    name = r.choice(NAMES)
    grades = [Fraction(r.randint(8, 20), 2) for _ in range(r.choice([3, 4]))]
    while not two_decimals(sum(grades) / len(grades)):
        grades[-1] += Fraction(1, 2)
    listed = "; ".join(es(g) for g in grades[:-1]) + f" y {es(grades[-1])}"  # commas are decimal signs here
    subject = r.choice(["matemáticas", "lengua", "ciencias", "historia", "inglés"])
    text = f"En {subject}, {name} ha sacado estas notas: {listed}. ¿Cuál es su nota media?"
    expr = "(" + " + ".join(es(g) for g in grades) + f") ÷ {len(grades)}"
    return text, sum(grades) / len(grades), expr, "Suma de las notas entre el número de notas"


def t_time(r: random.Random):
    name = r.choice(NAMES)
    sessions, minutes = r.randint(2, 7), r.choice([15, 20, 25, 30, 35, 40, 45, 50, 75, 90])
    activity = r.choice(["nadar", "estudiar piano", "correr", "leer", "entrenar al baloncesto"])
    text = (
        f"{name} dedica {minutes} minutos a {activity} cada día durante {sessions} días. ¿Cuántas horas "
        f"dedica en total?"
    )
    return text, Fraction(sessions * minutes, 60), f"{sessions} × {minutes} ÷ 60", "Minutos totales entre 60"


def t_fraction(r: random.Random):
    place = r.choice(["En una clase", "En un campamento", "En un coro", "En un equipo de atletismo"])
    den = r.choice([2, 3, 4, 5, 6])
    num = r.randint(1, den - 1)
    total = den * r.randint(3, 10)
    part = Fraction(num, den)
    words = {2: "medio", 3: "tercios", 4: "cuartos", 5: "quintos", 6: "sextos"}
    frac = "la mitad" if den == 2 else (f"un {words[den][:-1]}" if num == 1 else f"{num} {words[den]}")
    text = f"{place} hay {total} niños. {frac.capitalize()} de ellos llevan gafas. ¿Cuántos niños no llevan gafas?"
    return text, total - total * part, f"{total} - {total} × {num} ÷ {den}", "Total menos los que llevan gafas"


def t_unit_price(r: random.Random):
    name = r.choice(NAMES)
    fruit = r.choice(["cerezas", "fresas", "uvas", "tomates", "patatas", "peras"])
    kg_price = r.randrange(100, 900, 10)
    grams = r.choice([250, 500, 750, 1500, 2000, 2500])
    if not two_decimals(Fraction(kg_price * grams, 100_000)):
        grams = 500
    text = (
        f"En el mercado de {r.choice(PLACES)}, el kilo de {fruit} cuesta {euros(kg_price)}. {name} compra "
        f"{grams} gramos. ¿Cuántos euros paga?"
    )
    return (
        text,
        Fraction(kg_price * grams, 100_000),
        f"{es(Fraction(kg_price, 100))} × {grams} ÷ 1000",
        "Precio del kilo por los kilos",
    )


TEMPLATES = [
    t_change,
    t_total,
    t_share,
    t_speed,
    t_discount,
    t_recipe,
    t_garden,
    t_savings,
    t_ages,
    t_liquids,
    t_packs,
    t_average,
    t_time,
    t_fraction,
    t_unit_price,
]


def problems(r: random.Random):
    """Problems without end, in the order the seed gives: each template in turn (80 %) or at random,
    every text new, every answer positive, with at most two decimals and checked twice."""
    seen, attempts, made = set(), 0, 0
    while True:
        attempts += 1
        if attempts > (made + 1) * 50:
            raise SystemExit("too many rejected problems: widen the templates' ranges")
        template = TEMPLATES[made % len(TEMPLATES)] if r.random() < 0.8 else r.choice(TEMPLATES)
        text, answer, expression, how = template(r)
        if text in seen or answer <= 0 or not two_decimals(answer) or evaluate(expression) != answer:
            continue
        seen.add(text)
        made, attempts = made + 1, 0
        yield {
            "id": f"mat-{made:04d}",
            "prompt": f"{text}\n{INSTRUCTION}",
            "answer": es(answer),
            "solution": f"{how}: {expression} = {es(answer)}.\nRespuesta: {es(answer)}",
            "template": template.__name__[2:],
        }


def test_index(test: list[dict]):
    """The test problems as the contamination check indexes them (aura.data.contamination: the problem and
    its answer; n-grams every problem of a template shares are the template's, not an item's)."""
    from aura.data.contamination import MATH_TASK, EvalIndex, EvalItem

    return EvalIndex([EvalItem(MATH_TASK, x["id"], f"{x['prompt']} {x['answer']}") for x in test])


def seen_in(index, row: dict) -> bool:
    """Whether a train problem shares an n-gram with a test problem in any of its fields (what the check reads)."""
    return any(index.first_hit(str(v)) for v in row.values())


def build() -> tuple[list[dict], list[dict]]:
    """The test split first (140 of the first 640 problems, drawn with the seed), then the train split: the
    other 500, less every one that shares a 13-gram with a test problem (the same template and the same
    numbers and words, e.g. "20 minutos a correr cada día durante 3 días"), replaced by the next new
    problems that share none: the contamination check of a model trained on train.jsonl finds 0 test items."""
    r = random.Random(SEED)
    stream = problems(r)
    rows = [next(stream) for _ in range(TOTAL)]
    order = list(range(len(rows)))
    random.Random(SEED + 1).shuffle(order)
    test_ids = set(order[:TEST])
    test = [x for i, x in enumerate(rows) if i in test_ids]
    index = test_index(test)
    train = [x for i, x in enumerate(rows) if i not in test_ids and not seen_in(index, x)]
    while len(train) < TOTAL - TEST:
        row = next(stream)
        if not seen_in(index, row):
            train.append(row)
    return train, test


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the files differ from the templates' output")
    args = parser.parse_args()
    train, test = build()
    files = {OUT / "train.jsonl": render(train), OUT / "test.jsonl": render(test)}
    if args.check:
        stale = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for p in stale:
            print(f"{p} is not what scripts/build_math_es.py gives: re-run it", file=sys.stderr)
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    print(f"{len(train)} train and {len(test)} test problems in {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
