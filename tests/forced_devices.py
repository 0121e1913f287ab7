"""XLA_FLAGS for a process that plays ``n`` devices on the host CPU. Their collectives meet in a
rendezvous that XLA aborts after 40 s by default; on two loaded cores (the suite's other worker,
a benchmark beside it) eight device threads can take longer than that to arrive, so the flags give
them ten minutes: a slow machine then runs slowly instead of aborting."""


def xla_flags(n: int) -> str:
    return (
        f"--xla_force_host_platform_device_count={n} "
        "--xla_cpu_collective_call_warn_stuck_timeout_seconds=120 "
        "--xla_cpu_collective_call_terminate_timeout_seconds=600 "
        "--xla_cpu_collective_timeout_seconds=600"
    )
