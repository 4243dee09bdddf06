"""The controller manager of a ros2_control arm, as a run uses it: list the controllers and activate
the commanding one at the start, hand the arm to the holding one at the end.

ros2_control's controller manager answers ``<controller_manager>/list_controllers``
(``controller_manager_msgs/srv/ListControllers``: each controller's name and state) and
``<controller_manager>/switch_controller`` (``SwitchController``: deactivate some controllers and
activate others in one update cycle). A run starts with a strict switch from the holding controller
(or whichever controller claims the joints) to the commanding one, unless the commanding one is
active already, and ends, clean or stopped, with a strict switch back to the holding controller.
The service types come from :mod:`mbctl.hardware.ros2.interfaces` (built for rclpy from PyPI at first
use), imported only here.

The clients are made once, at the start, and kept: a client made at the moment of a stop would have
to be discovered by the controller manager before its answer could reach it.
"""

from __future__ import annotations

import time
from typing import Any

from mbctl.config.ros2 import Ros2Spec
from mbctl.errors import InputError
from mbctl.hardware.interface import HardwareError

__all__ = ["STRICT", "ControllerManager", "list_controllers_type", "switch_controller_type", "service_name"]

STRICT = 2  # SwitchController.Request.STRICT: the whole switch or nothing
_POLL_S = 0.001
RESEND_S = 0.5  # s: an unanswered request is sent again after this long


def switch_controller_type() -> Any:
    """The ``controller_manager_msgs/srv/SwitchController`` class."""
    from mbctl.hardware.ros2 import interfaces

    return interfaces.switch_controller_type()


def list_controllers_type() -> Any:
    """The ``controller_manager_msgs/srv/ListControllers`` class."""
    from mbctl.hardware.ros2 import interfaces

    return interfaces.list_controllers_type()


def service_name(controller_manager: str, service: str = "switch_controller") -> str:
    """``<controller_manager>/<service>``."""
    return f"{controller_manager.rstrip('/')}/{service}"


class ControllerManager:
    """Clients of a controller manager's ``list_controllers`` and ``switch_controller`` on ``node``.

    Args:
        node: An rclpy node whose callbacks an executor thread runs (the futures complete there).
        spec: The ``[ros2]`` table: the manager's name, the commanding and holding controllers.
    """

    def __init__(self, node: Any, spec: Ros2Spec):
        self.spec = spec
        self._list_type, self._switch_type = list_controllers_type(), switch_controller_type()
        self.changed = False  # activate_commanding switched controllers
        self._list = node.create_client(self._list_type, service_name(spec.controller_manager, "list_controllers"))
        self._switch = node.create_client(self._switch_type, service_name(spec.controller_manager))

    def _call(self, client: Any, request: Any, timeout_s: float) -> tuple[Any, int]:
        """The answer and how many times the request was sent: a request sent before the service's
        reader has matched this client is lost, so an unanswered one is sent again every
        :data:`RESEND_S` until ``timeout_s`` (s)."""
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                raise HardwareError(f"no {client.srv_name} service within {timeout_s:g} s")
            time.sleep(_POLL_S)
        sent, futures, resend = 0, [], 0.0
        while True:
            if time.monotonic() >= resend:
                futures.append(client.call_async(request))
                sent += 1
                resend = time.monotonic() + RESEND_S
            done = [f for f in futures if f.done()]
            if done:
                return done[0].result(), sent
            if time.monotonic() > deadline:
                raise HardwareError(f"{client.srv_name}: no answer within {timeout_s:g} s")
            time.sleep(_POLL_S)  # the runtime's executor thread completes the futures

    def states(self, timeout_s: float) -> dict[str, str]:
        """Every loaded controller's state (``"active"``, ``"inactive"``, ...) by name.

        Raises:
            HardwareError: No service or no answer within ``timeout_s`` (s).
        """
        answer, _ = self._call(self._list, self._list_type.Request(), timeout_s)
        return {c.name: c.state for c in answer.controller}

    def switch(self, activate: list[str], deactivate: list[str], timeout_s: float) -> None:
        """A strict switch.

        Raises:
            HardwareError: No service, no answer, or the switch refused (its message).
        """
        request = self._switch_type.Request()
        request.activate_controllers, request.deactivate_controllers = activate, deactivate
        request.strictness = STRICT
        answer, sent = self._call(self._switch, request, timeout_s)
        if not answer.ok and sent > 1:  # the first request may have switched, and a second been refused for it
            states = self.states(timeout_s)
            if all(states.get(c) == "active" for c in activate) and all(states.get(c) != "active" for c in deactivate):
                return
        if not answer.ok:
            why = getattr(answer, "message", "")
            raise HardwareError(f"{self._switch.srv_name} refused to activate {', '.join(activate) or 'nothing'} and deactivate "
                                f"{', '.join(deactivate) or 'nothing'}{f' ({why})' if why else ''}")

    def activate_commanding(self, timeout_s: float) -> str:
        """Make the commanding controller the active one (a strict switch from whichever controller that
        ``holding_controller`` names, if active); returns what was done, for the run summary.

        Raises:
            InputError: The commanding controller is not loaded, or not configured (one line).
            HardwareError: No service, no answer, or the switch refused.
        """
        spec, name = self.spec, self.spec.commanding_controller
        states = self.states(timeout_s)
        where = f"{service_name(spec.controller_manager, 'list_controllers')} lists {', '.join(f'{c} ({s})' for c, s in states.items()) or 'no controller'}"
        if name not in states:
            raise InputError(f"controller {name} is not loaded: {where}; load it (and configure it) first", file=spec.file, field="ros2.active_controller")
        if states[name] == "active":
            return f"{name} was active"
        if states[name] != "inactive":
            raise InputError(f"controller {name} is {states[name]}, not inactive: configure it first ({where})", file=spec.file, field="ros2.active_controller")
        holding = spec.holding_controller
        deactivate = [holding] if holding is not None and states.get(holding) == "active" else []
        self.switch([name], deactivate, timeout_s)
        self.changed = True
        return f"switched from {deactivate[0]} to {name}" if deactivate else f"activated {name}"

    def to_holding(self, timeout_s: float) -> str:
        """The strict switch from the commanding controller to the holding one; what was done.

        Raises:
            HardwareError: No service, no answer, or the switch refused.
        """
        spec = self.spec
        self.switch([spec.holding_controller], [spec.commanding_controller], timeout_s)
        return f"handed over: {spec.controller_manager} switched from {spec.commanding_controller} to {spec.holding_controller}"
