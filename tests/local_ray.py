"""A local Ray instance for the backend tests, on loopback as the backend's own local instance is
(``repro.ray_backend.LOOPBACK_NODE_IP``: Ray rewrites 127.0.0.1 to the host's interface address)."""

from contextlib import contextmanager

import pytest


@contextmanager
def local_ray(num_cpus: int = 2):
    ray = pytest.importorskip("ray")
    from repro.ray_connect import LOOPBACK_NODE_IP, runtime_env

    ray.init(
        num_cpus=num_cpus,
        address="local",
        runtime_env=runtime_env(),
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address=LOOPBACK_NODE_IP,
    )
    try:
        yield
    finally:
        ray.shutdown()
