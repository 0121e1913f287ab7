"""absl flags defined into a FlagValues of a test's own, not the process' ``FLAGS``."""

from absl import flags


class Into:
    """Stands for the ``absl.flags`` module given to an executor's ``define_flags``: its
    ``DEFINE_*`` functions define into ``values``."""

    def __init__(self, values: flags.FlagValues):
        self.values = values

    def __getattr__(self, name):
        define = getattr(flags, name)
        return lambda *a, **kw: define(*a, flag_values=self.values, **kw)
