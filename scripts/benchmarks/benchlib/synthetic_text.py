"""Synthetic parallel text shaped like WMT16 en-de, for the data benchmarks: word types over each
language's letters (German with umlauts and ß), sentences of Zipf-distributed words with log-normal
lengths, the German side about as long as the English one."""

from __future__ import annotations

EN_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
DE_LETTERS = "enisratdhulcgmobwfkzvpäüößjyxq"


def word_types(rng, count: int, letters: str) -> list[str]:
    """``count`` distinct words over ``letters`` (earlier letters more frequent), 1-14 letters."""
    import numpy as np

    weights = 1.0 / np.arange(1, len(letters) + 1) ** 0.8
    weights /= weights.sum()
    out, seen = [], set()
    while len(out) < count:
        lengths = np.clip(rng.poisson(5, count), 1, 14)
        chars = rng.choice(len(letters), int(lengths.sum()), p=weights)
        ends = np.cumsum(lengths)
        for a, b in zip(ends - lengths, ends):
            w = "".join(letters[c] for c in chars[a:b])
            if w not in seen and len(out) < count:
                seen.add(w)
                out.append(w)
    return out


def sentences(rng, words, lengths):
    """One sentence per length, of Zipf-distributed words of ``words`` (rank order)."""
    import numpy as np

    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    cdf = np.cumsum(1.0 / ranks**1.05)
    cdf /= cdf[-1]
    ids = np.searchsorted(cdf, rng.random(int(lengths.sum())))
    arr = np.array(words, dtype=object)[ids]
    ends = np.cumsum(lengths)
    return [" ".join(arr[a:b]) for a, b in zip(ends - lengths, ends)]


def pair_generator(seed: int, count: int, en_words, de_words, mean_words: float):
    """``count`` (en, de) pairs, made 50,000 at a time."""
    import numpy as np

    def gen():
        rng = np.random.default_rng([seed, 1])
        sigma = 0.55
        mu = np.log(mean_words) - sigma**2 / 2
        for start in range(0, count, 50_000):
            n = min(50_000, count - start)
            en_len = np.clip(np.rint(rng.lognormal(mu, sigma, n)), 1, 150).astype(np.int64)
            de_len = np.clip(np.rint(en_len * rng.normal(0.95, 0.12, n)), 1, 150).astype(np.int64)
            yield from zip(sentences(rng, en_words, en_len), sentences(rng, de_words, de_len))

    return gen
