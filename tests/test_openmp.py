"""A thread gives back its OpenMP team (``agentq.models.openmp``): its worker threads end,
other threads' teams stay. Linux with >= 2 cores (CI's machine); elsewhere torch makes
no team to give back."""

import os
import threading
import time

import pytest
import torch

from agentq.models.openmp import release_openmp_team

needs_teams = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2, reason="needs Linux threads and >= 2 cores"
)
pytestmark = needs_teams


def os_threads() -> set[int]:
    """The process's live threads, by OS id."""
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def parallel_op() -> None:
    """An op torch splits over its OpenMP team (far above ATen's grain size)."""
    torch.ones(4_000_000).exp_()


def team_of_own() -> set[int]:
    """The OS threads the calling thread's parallel op started (empty if its team existed)."""
    before = os_threads()
    parallel_op()
    return os_threads() - before


def threads_once_ended(team: set[int], timeout: float = 5.0) -> set[int]:
    """The live threads once ``team``'s have exited, or at ``timeout``: a released worker
    leaves its barrier at once but its OS thread ends a moment later (CI saw one still
    listed right after the release)."""
    deadline = time.monotonic() + timeout
    while team & os_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return os_threads()


def in_thread(fn):
    """``fn()`` in a fresh thread (pytest's own thread may already hold a team)."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_a_thread_gives_back_its_own_team_and_no_other():
    other_ready, other_done = threading.Event(), threading.Event()
    other_team: set[int] = set()

    def other() -> None:  # a thread that keeps its team while this test's thread releases
        other_team.update(team_of_own())
        other_ready.set()
        other_done.wait()

    keeper = threading.Thread(target=other)
    keeper.start()
    other_ready.wait()

    def body():
        team = team_of_own()
        released = release_openmp_team()
        return team, released, threads_once_ended(team)

    try:
        team, released, after = in_thread(body)
    finally:
        other_done.set()
        keeper.join()
    assert len(team) == len(other_team) == torch.get_num_threads() - 1 >= 1
    assert released and not team & after  # its workers ended
    assert other_team <= after  # the other thread's did not


def test_the_next_parallel_op_makes_the_team_again():
    def body():
        team_of_own()
        release_openmp_team()
        return team_of_own(), torch.ones(1000).exp().sum().item()

    team, value = in_thread(body)
    assert len(team) == torch.get_num_threads() - 1 and value == pytest.approx(1000 * 2.718281828, rel=1e-6)
