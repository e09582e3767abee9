#!/usr/bin/python3
"""A world of copy and recall drills, for teaching a fresh LM to copy from its context (docs/target.md).

    scripts/recall_world.py OUT [--train 60000] [--test 100] [--seed 5]

Writes OUT/train.jsonl, OUT/test.jsonl, an empty OUT/captions.jsonl and OUT/world.json in the world's
format (docs/formats.md), every sample a one-turn `drill` with no pictures, so `vlmspec train target
--data OUT` trains on it like any world. The items are the world's own words (shapes, colours, cell
names, letters, digits, numbers 1-99, words of the glyph pictures), drawn at random for every sample, so an
answer can only be predicted by finding it in the prompt:
  - 25% "Repeat exactly: star, green, circle, pink." -> the same list (4-14 items);
  - 45% "Facts: E: white; F: yellow; T: white. Give the values of T, E." -> "T: white; E: white." (3-8
    facts, 2 or more asked, in a random order);
  - 30% "Facts: ... Which ones have 66, 58?" -> "66: STONE; 58: BRUSH." (every key with that value).
The checker's `word` rule does not score these lists; read them with `vlmspec eval --details`.
Standard library only.
"""
import argparse
import json
import os
import random

SHAPES = "circle square triangle star ring hexagon diamond cross heart".split()
COLORS = "red green blue yellow orange purple pink brown black white gray".split()
CELLS = ["top left", "top middle", "top right", "middle left", "center", "middle right", "bottom left",
         "bottom middle", "bottom right"]
WORDS = "BRICK DOLPHIN BRUSH CRATE LAMP RIVER STONE CLOUD TIGER APPLE HOUSE TRAIN".split()
LETTERS = [chr(65 + i) for i in range(26)]
NUMBERS = [str(i) for i in range(1, 100)]


def drill(rng):
    """One (user, answer) pair."""
    kind = rng.random()
    if kind < 0.25:
        pool = rng.choice([SHAPES + COLORS, LETTERS + [str(d) for d in range(10)], WORDS + COLORS, CELLS])
        items = [rng.choice(pool) for _ in range(rng.randint(4, 14))]
        return "Repeat exactly: " + ", ".join(items) + ".", ", ".join(items) + "."
    keys_from = rng.choice([SHAPES, CELLS, LETTERS, WORDS])
    values_from = rng.choice([COLORS, NUMBERS, SHAPES, WORDS])
    m = rng.randint(3, min(8, len(keys_from)))
    keys = rng.sample(keys_from, m)
    values = [rng.choice(values_from) for _ in keys]
    facts = "; ".join("%s: %s" % kv for kv in zip(keys, values))
    asked = rng.sample(range(m), rng.randint(2, m))
    if kind < 0.7:
        user = "Facts: %s. Give the values of %s." % (facts, ", ".join(keys[j] for j in asked))
        return user, "; ".join("%s: %s" % (keys[j], values[j]) for j in asked) + "."
    unique = [j for j in asked if values.count(values[j]) == 1][:4] or [asked[0]]
    user = "Facts: %s. Which ones have %s?" % (facts, ", ".join(values[j] for j in unique))
    answer = "; ".join("%s: %s" % (values[j], ", ".join(keys[t] for t in range(m) if values[t] == values[j]))
                       for j in unique)
    return user, answer + "."


def sample(rng, split, i):
    user, answer = drill(rng)
    turn = {"kind": "first", "first_image": 0, "n_images": 0, "user": user, "assistant": answer,
            "answer": answer, "check": "word", "query": {"type": "caption"}}
    return {"id": "%s-drill-%05d" % (split, i), "suite": "drill", "images": [], "captions": [], "scenes": [],
            "turns": [turn]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=60000)
    ap.add_argument("--test", type=int, default=100)
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    if a.train < 1 or a.test < 1:
        ap.error("--train and --test must be at least 1")
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for split, n in (("train", a.train), ("test", a.test)):
        with open(os.path.join(a.out, split + ".jsonl"), "w") as f:
            for i in range(n):
                f.write(json.dumps(sample(rng, split, i), separators=(",", ":")) + "\n")
    open(os.path.join(a.out, "captions.jsonl"), "w").close()
    world = {"format": "vlmspec-world", "version": 1, "seed_str": str(a.seed), "seed": a.seed, "image_size": 64,
             "n_train_per_suite": a.train, "n_test_per_suite": a.test, "suites": ["drill"],
             "counts": {"test": a.test, "train": a.train, "captions": 0}, "regenerated_for_uniqueness": 0}
    with open(os.path.join(a.out, "world.json"), "w") as f:
        json.dump(world, f)
    print("wrote %s: %d train + %d test drills, seed %d" % (a.out, a.train, a.test, a.seed))


if __name__ == "__main__":
    main()
