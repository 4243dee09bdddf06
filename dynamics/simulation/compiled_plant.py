"""The simulated plant's semi-implicit steps, generated as C (:func:`plant_stepper`).

The steps of :class:`~mbctl.dynamics.simulation.stepper.FrictionStepper` (joint friction with
its damping implicit and LuGre states stepped exactly, RFE and flexible-base springs, servos)
as one CasADi function of the robot's numbers, compiled once per structure and thread; the
force elements come from :mod:`mbctl.dynamics.simulation.compiled_forces`, as for the
constrained core of :mod:`mbctl.dynamics.simulation.compiled`.
"""

from __future__ import annotations

import threading

import casadi as ca

from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.compiled_constraints import spd_solve
from mbctl.dynamics.simulation.compiled_forces import elastic_diagonal_of, elastic_of, friction_damping_of, friction_of
from mbctl.dynamics.simulation.structure import parametrize_plant, plant_key
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["plant_stepper"]

_PLANTS_KEPT = 16  # plant structures kept per thread
_plants = threading.local()


def _plant_parts(robot: RobotModel, v_smooth: float):
    from mbctl.dynamics.simulation.stepper import FrictionStepper

    stepper = FrictionStepper(robot, v_smooth=v_smooth)
    forces = [stepper.friction, *([stepper.elastic] if stepper.elastic is not None else [])]
    return stepper, forces


def plant_stepper(robot: RobotModel, steps: int = 1, *, v_smooth: float = 1e-3, cache=None) -> CompiledFunction:
    """``(q, dq, s, tau, h) -> (q_next, dq_next, s_next)``: ``steps`` steps of
    :class:`~mbctl.dynamics.simulation.stepper.FrictionStepper` (semi-implicit, friction
    damping implicit, LuGre states exact) of length ``h`` (s) each, holding the
    generalized forces ``tau`` (N·m, N), in C.

    Springs and dampers of RFE links and the flexible base are stepped as there: their
    damping and ``h`` times their stiffness (diagonals, ``sum_E J_E^T S_E J_E`` for the
    base supports) join the implicit part. Load-dependent friction is refused as by the
    interpreted stepper.

    A robot with servos (``[joints.<name>.actuator]``, the stepper's ``servo_names`` order)
    takes two more inputs, held over the steps: ``goal`` (rad) and ``on`` (1 torque on, 0
    off; the goal is then ignored), one per servo; their torque, damping and armature
    (:func:`mbctl.dynamics.actuator.servo_torque`) and their LuGre states (after the
    joints' in ``s``) are stepped as by the interpreted stepper.

    The robot's inertias, joint friction and springs are a last input, bound to this robot's
    values (:meth:`~mbctl.dynamics.codegen.CompiledFunction.bind`), so robots of one structure
    share one compilation per thread (``reused`` True after the first); the servos' numbers
    are compiled in.
    """
    stepper, forces = _plant_parts(robot, v_smooth)
    values = parametrize_plant(robot, forces, symbolic=False).vector
    key = (plant_key(robot, forces, stepper.servos, values.names), steps, None if cache is None else str(cache))
    plants = getattr(_plants, "by_key", None)
    if plants is None:
        plants = _plants.by_key = {}
    if key in plants:
        return plants[key].instance().bind(values.array)
    plants[key] = compiled = compile_function(_plant_function(robot, stepper, forces, steps, v_smooth), cache=cache)
    while len(plants) > _PLANTS_KEPT:
        plants.pop(next(iter(plants)))
    return compiled.bind(values.array)


def _plant_function(robot: RobotModel, servo_stepper, forces, steps: int, v_smooth: float) -> ca.Function:
    """The CasADi function of :func:`plant_stepper`, with the parameter vector as its last input."""
    params = parametrize_plant(robot, forces)
    friction = forces[0]
    servos, servo_v = servo_stepper.servos, [int(i) for i in servo_stepper._servo_v]
    stateful = servo_stepper.servo_states
    nv, nf = robot.nv, len(friction._lugre)
    ns, nk = nf + len(stateful), len(servos)
    sym = SymbolicDynamics(robot, bodies=params.bodies, armature=params.armature)
    p = params.vector.symbols
    q, dq, z, tau = ca.SX.sym("q", nv), ca.SX.sym("dq", nv), ca.SX.sym("s", ns), ca.SX.sym("tau", nv)
    goal, on = ca.SX.sym("goal", nk), ca.SX.sym("on", nk)
    h = ca.SX.sym("h")
    static, lugre = params.static[0], params.lugre[0]
    z_joint = [law.z_step(z[k], dq[i], h) for k, ((i, _, _), law) in enumerate(zip(friction._lugre, lugre))]
    z_servo = [servos[k].z_step(z[nf + j], dq[servo_v[k]], h) for j, k in enumerate(stateful)]
    z_next = ca.vertcat(*z_joint, *z_servo) if ns else ca.SX(0, 1)
    Q, _, _ = friction_of(friction, dq, z_next[:nf] if nf else ca.SX(0, 1), nv, static, lugre)  # no load-dependent joints here (refused above)
    damping = [ca.SX(0.0)] * nv
    for i, c in friction_damping_of(friction, dq, static, lugre, v_smooth):
        damping[i] = c
    armature = [0.0] * nv
    servo_z = dict(zip(stateful, z_servo))
    for k, (servo, i) in enumerate(zip(servos, servo_v)):
        torque, c = servo.torque(q[i], dq[i], goal[k], on[k], servo_z.get(k, 0.0))
        Q[i] += torque
        damping[i] += c
        armature[i] = servo.joint_armature()
    implicit = ca.vertcat(*damping)
    if len(forces) > 1:
        elastic = forces[1]
        k, c, S, D = params.springs[1]
        Q += elastic_of(elastic, sym, q, dq, (k, c, S, D))
        implicit += elastic_diagonal_of(elastic, sym, q, c, D) + h * elastic_diagonal_of(elastic, sym, q, k, S)
    M = sym.mass_matrix_of(q) + ca.diag(ca.DM(armature)) + h * ca.diag(implicit)
    dq_next = dq + spd_solve(M, h * (tau + Q - sym.bias_of(q, dq)))
    x = ca.vertcat(q, dq, z)
    extra = [goal, on] if nk else []
    one = ca.Function("plant_step", [x, tau, h, *extra, p], [ca.vertcat(q + h * dq_next, dq_next, z_next)])
    many = one.fold(steps)
    n_p = p.numel()
    q_in, dq_in, z_in, tau_in, h_in = ca.MX.sym("q", nv), ca.MX.sym("dq", nv), ca.MX.sym("s", ns), ca.MX.sym("tau", nv), ca.MX.sym("h")
    extra_in = [ca.MX.sym("goal", nk), ca.MX.sym("on", nk)] if nk else []
    p_in = ca.MX.sym("p", n_p)
    repeated = (ca.repmat(e, 1, steps) for e in (tau_in, h_in, *extra_in, p_in))
    out = many(ca.vertcat(q_in, dq_in, z_in), *repeated)
    names = (["q", "dq", "s", "tau", "h", *(["goal", "on"] if nk else []), "p"], ["q_next", "dq_next", "s_next"])
    return ca.Function(f"plant{steps}_{robot.ident}", [q_in, dq_in, z_in, tau_in, h_in, *extra_in, p_in], [out[:nv], out[nv : 2 * nv], out[2 * nv :]], *names)
