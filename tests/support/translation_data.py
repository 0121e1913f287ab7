"""The ``data`` keys of a small numbers corpus, shared by the translation and token-cache tests."""


def numbers_keys(**kw) -> dict:
    """The ``data`` keys of a small numbers corpus (``kw`` added or replacing)."""
    return dict(
        dict(
            corpus="numbers",
            num_train=600,
            num_eval=40,
            split_seed=0,
            max_digits=3,
            numbers_per_sentence=3,
        ),
        **kw,
    )
