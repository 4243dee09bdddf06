"""The end of a clean run over ROS 2: the arm handed to a holding controller by its controller manager.

ros2_control's controller manager switches controllers through its ``switch_controller`` service
(``controller_manager_msgs/srv/SwitchController``): deactivate the controller mbctl commanded and
activate the holding one (a joint trajectory controller holding its last goal, say) in one strict
switch. The service type comes from :mod:`mbctl.hardware.ros2.interfaces` (built for rclpy from PyPI
at first use), imported only here, when a hand-over is configured.
"""

from __future__ import annotations

from typing import Any

from mbctl.config.ros2 import Ros2Spec
from mbctl.hardware.interface import HardwareError

__all__ = ["STRICT", "switch_controller_type", "switch_to_holding", "service_name"]

STRICT = 2  # SwitchController.Request.STRICT: the whole switch or nothing


def switch_controller_type() -> Any:
    """The ``controller_manager_msgs/srv/SwitchController`` class."""
    from mbctl.hardware.ros2 import interfaces

    return interfaces.switch_controller_type()


def service_name(controller_manager: str) -> str:
    """``<controller_manager>/switch_controller``."""
    return f"{controller_manager.rstrip('/')}/switch_controller"


def switch_to_holding(node: Any, spec: Ros2Spec, timeout_s: float = 2.0) -> str:
    """Ask ``spec.controller_manager`` to deactivate the commanding controller and activate
    ``spec.holding_controller``; returns what was done (for the run summary).

    Raises:
        HardwareError: No service within ``timeout_s`` (s), no answer, or the switch refused.
    """
    import time

    srv = switch_controller_type()
    name = service_name(spec.controller_manager)
    client = node.create_client(srv, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise HardwareError(f"no {name} service within {timeout_s:g} s")
        request = srv.Request()
        request.activate_controllers = [spec.holding_controller]
        request.deactivate_controllers = [spec.commanding_controller]
        request.strictness = STRICT
        future = client.call_async(request)
        deadline = time.monotonic() + timeout_s
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.002)  # the runtime's executor thread completes the future
        if not future.done():
            raise HardwareError(f"{name}: no answer within {timeout_s:g} s")
        answer = future.result()
        if not answer.ok:
            raise HardwareError(f"{name} refused to switch from {spec.commanding_controller} to {spec.holding_controller}")
        return f"handed over: {spec.controller_manager} switched from {spec.commanding_controller} to {spec.holding_controller}"
    finally:
        node.destroy_client(client)
