"""The parts of ``scripts/bench_lstm.py``, one concern a module (the script keeps the flags and
``main``; ``bench_loop.py`` and ``bench_hostmem.py`` reach these through it):

* :mod:`.lstm_steps`: the PTB shapes, the hand FLOP count and the jitted JAX steps (lbtrain, its
  ablations, Flax's stock LSTM);
* :mod:`.torch_ref`: the PyTorch references, a bare step and a training loop;
* :mod:`.profiling`: per-call timing, the matmul peak, op profiles and what bounds the bare step;
* :mod:`.loop_columns`: the lbtrain training loop and its bare fused step as timed columns;
* :mod:`.step_mode` and :mod:`.loop_mode`: the timed rounds and result rows of ``--mode=step`` and
  ``--mode=loop``;
* :mod:`.report`: the printed lines and tables, and the JSON.

None of them imports JAX at import time, so ``host_malloc`` can still be set after importing them.
"""
