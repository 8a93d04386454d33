#!/usr/bin/python3
"""Writes corpus.txt, the small English-like text examples/train.py trains on by default.

The text is generated here from a tiny hand-written grammar (no copied prose), so the corpus
is free of copyright questions and can be rebuilt byte for byte:

    /usr/bin/python3 examples/data/make_corpus.py            # writes examples/data/corpus.txt
    /usr/bin/python3 examples/data/make_corpus.py --check    # exits 1 if the file is stale

The grammar is deliberately repetitive: a byte-level model of a few thousand parameters learns
its spelling and word order within tens of steps, which is what the tests need to see the loss
fall. Output is pure ASCII so one byte is one character.
"""

import argparse
import pathlib
import random
import sys

SEED = 20240607
TARGET_BYTES = 200_000

# Word lists of the grammar. Everything is about the small world of a training cluster, the
# weather and a village; the mix gives the model several distinct "topics" to learn.
SUBJECTS = [
    "the scheduler", "the planner", "a worker", "the cluster", "the daemon", "every node",
    "the old farmer", "a young baker", "the river", "the night train", "my neighbour",
    "the small cat", "the teacher", "a tired engineer", "the north wind", "the village",
]
VERBS = [
    "watches", "counts", "moves", "carries", "finds", "keeps", "checks", "builds", "follows",
    "measures", "remembers", "waits for", "sends", "reads", "plans", "repairs",
]
OBJECTS = [
    "the queue", "eight GPUs", "a long job", "the checkpoint", "the evening bread",
    "the blue boat", "every token", "the last batch", "a quiet road", "the warm stove",
    "the memory budget", "a bright lamp", "the gradient", "three green apples", "the map",
    "the morning post",
]
ADVERBS = [
    "slowly", "carefully", "again", "before dawn", "after the storm", "without a sound",
    "every hour", "in the cold", "once more", "at noon", "with great care", "all day",
]
CONNECTIVES = ["and then", "because", "while", "so", "but", "until"]
OPENERS = ["Today", "Yesterday", "In the spring", "At night", "On monday", "Later"]


def sentence(rng: random.Random) -> str:
    """One sentence: an optional opener, one or two clauses, a full stop."""

    def clause() -> str:
        text = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
        if rng.random() < 0.5:
            text += " " + rng.choice(ADVERBS)
        return text

    text = clause()
    if rng.random() < 0.4:
        text += f" {rng.choice(CONNECTIVES)} {clause()}"
    if rng.random() < 0.3:
        text = f"{rng.choice(OPENERS)} {text}"
    return text[0].upper() + text[1:] + "."


def corpus() -> str:
    """Paragraphs of 3 to 7 sentences, separated by blank lines, up to TARGET_BYTES."""
    rng = random.Random(SEED)
    paragraphs, size = [], 0
    while size < TARGET_BYTES:
        paragraph = " ".join(sentence(rng) for _ in range(rng.randint(3, 7)))
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).with_name("corpus.txt"))
    parser.add_argument("--check", action="store_true",
                        help="only compare with the existing file; exit 1 if it differs")
    args = parser.parse_args()
    text = corpus()
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="ascii") == text
        print(f"{args.out}: {'up to date' if same else 'stale'}")
        return 0 if same else 1
    args.out.write_text(text, encoding="ascii")
    print(f"wrote {args.out} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
