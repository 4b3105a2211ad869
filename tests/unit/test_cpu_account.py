"""The emulation's account of the host's CPU (dcnet.cpu_account): a process that spins is charged to its role,
one that sleeps is not, and a step that left the host no idle CPU is told apart (its ramp stopped at the
host, not at the system: make emulate's "host CPU")."""

from __future__ import annotations

import subprocess
import sys
import time

from dcnet.cpu_account import IDLE, KERNEL, OTHER, CpuAccount, host_ran_out, summary
from dcnet.emulate import Point, Step


def test_a_spinning_process_is_charged_to_its_role_and_a_sleeping_one_is_not() -> None:
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    sleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.3)  # both past their interpreter's start
        account = CpuAccount(lambda: {"shims": [spin.pid], "redis": [sleep.pid]})
        account.start()
        time.sleep(1.0)
        cpu = account.stop()
    finally:
        spin.kill()
        sleep.kill()
        spin.wait()
        sleep.wait()
    assert cpu["shims"] > 50, cpu  # most of one core (the machine may be shared)
    assert cpu["redis"] < 5, cpu
    assert 0 <= cpu[IDLE] <= 100 and cpu[KERNEL] >= 0 and cpu[OTHER] >= 0, cpu
    assert f"shims {cpu['shims']:.0f}%" in summary(cpu), summary(cpu)


def test_the_summary_puts_the_busiest_roles_first() -> None:
    cpu = {"shims": 60.0, "redis": 0.4, "clients": 30.0, KERNEL: 45.0, OTHER: 2.0, IDLE: 31.6, "steal": 5.0}
    assert summary(cpu) == "shims 60% kernel packets 45% clients 30% other 2% | idle 32%"
    assert summary(cpu, top=1) == "shims 60% | idle 32%"


def test_a_process_that_ended_in_the_window_is_left_out() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    account = CpuAccount(lambda: {"clients": [gone.pid]})
    account.start()
    gone.wait()
    assert account.stop()["clients"] == 0


def _step(ok: bool, idle: float) -> Step:
    return Step(
        rate=100, goodput=90, errors=0.0 if ok else 0.2, metered=0.0, p99_ms=10, hit_ratio=0.5, server_load=0.5,
        cpu={"shims": 80.0, IDLE: idle},
    )  # fmt: skip


def test_a_ramp_that_stopped_with_the_host_busy_says_so() -> None:
    assert host_ran_out({IDLE: 3.0}) and not host_ran_out({IDLE: 40.0}) and not host_ran_out({})
    busy = Point("fig9a", "distcache", 0.99, 90, 400, "server 9", [_step(True, 40), _step(False, 2)])
    assert busy.limit == "errors (host CPU)"
    server = Point("fig9a", "distcache", 0.99, 90, 400, "server 9", [_step(True, 40), _step(False, 30)])
    assert server.limit == "errors"
    assert Point("fig9a", "distcache", 0.99, 90, 400, "server 9", [_step(True, 40)]).limit == "none (never saturated)"
