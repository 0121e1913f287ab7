"""The shared parts of the benchmarks in scripts/benchmarks/. A benchmark, ``bench_<name>.py``
beside this package, keeps its flags, its ``main`` and what only it reports; running it puts its
folder, and so this package, on ``sys.path``. One line a module: what it holds; then the ``<name>``
of each benchmark that imports it.

* ``lstm_steps``: the PTB shapes, the hand FLOP count, the jitted JAX LSTM steps; lstm, loop
* ``torch_ref``: the PyTorch references, a bare step and a training loop; lstm
* ``profiling``: time per call, the matmul peak, op profiles, what bounds a step; lstm, resnet
* ``loop_columns``: the training loop and its bare fused step as timed columns; lstm, loop, hostmem
* ``step_mode``: the timed rounds and result rows of ``bench_lstm.py --mode=step``; lstm
* ``loop_mode``: the timed rounds and result rows of ``bench_lstm.py --mode=loop``; lstm
* ``report``: printed rows, tables, JSON, CPU model, phases; lstm, hostmem, input, data, prepare
* ``input_stages``: the ImageNet input stages over JPEG bytes, timed per core; input
* ``synthetic_text``: synthetic parallel text shaped like WMT16 en-de; data, prepare

``bench_accum.py`` imports none of them. None imports JAX or PyTorch at import time, so
``host_malloc`` can still be set after importing them.
"""
