"""DDS kept on this machine for the ROS 2 tests: localhost-only discovery and a domain id per test.

Each test that asks for the fixture ``ros_domain`` (imported: ``from ros2_domains import ros_domain_fixture``) gets a domain of its own, distinct per pytest-xdist worker
(``PYTEST_XDIST_WORKER`` = ``gw0``, ``gw1``, ...) and per test within a worker, so that no two
tests that run at once hear each other; ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` keeps every
packet on this machine (child processes inherit both).
"""

from __future__ import annotations

import itertools
import os

import pytest

FIRST_DOMAIN = 140  # 140 .. 229: 45 domains per worker for two workers (DDS allows 0 .. 232)
PER_WORKER = 45
_next = itertools.count()


def domain_for(worker: str, index: int) -> int:
    """The domain of the ``index``-th test of xdist ``worker`` (``""`` without xdist)."""
    w = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return FIRST_DOMAIN + (w * PER_WORKER + index % PER_WORKER) % (2 * PER_WORKER)


@pytest.fixture(name="ros_domain")
def ros_domain_fixture(monkeypatch) -> int:
    """A ROS 2 domain id of this test's own, set in ``ROS_DOMAIN_ID`` with localhost-only discovery."""
    domain = domain_for(os.environ.get("PYTEST_XDIST_WORKER", ""), next(_next))
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.delenv("ROS_STATIC_PEERS", raising=False)
    return domain
