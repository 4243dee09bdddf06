"""``python -m mbctl.hardware.franka.serve --hostname 127.a.b.c --q0 q1,...,q7``: franky-sim's FR3 in
MuJoCo, started at ``q0`` (rad), serving libfranka's protocol on the given loopback address (port 1337,
the gripper's 1338) until SIGINT or SIGTERM. Prints ``franky-sim: FR3 on <address>`` once it serves.

franky-sim's own ``franky-sim --simulator mujoco`` starts the arm at its default pose; this entry point
differs only there (franky-sim's ``add_robot(initial_q=...)``), so a run can begin at its trajectory's start.
"""

from __future__ import annotations

import argparse
import os
import signal

__all__ = ["READY", "main"]

READY = "franky-sim: FR3 on"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mbctl.hardware.franka.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hostname", required=True, help="loopback address to serve on (127.x.y.z)")
    parser.add_argument("--q0", required=True, help="initial joint positions, rad, seven comma-separated numbers")
    args = parser.parse_args(argv)
    q0 = [float(x) for x in args.q0.split(",")]
    if len(q0) != 7:
        parser.error(f"--q0 needs 7 numbers, got {len(q0)}")

    from franky_sim import SimulationServer
    from franky_sim.mujoco_simulator import MujocoSimulator

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM ends it as Ctrl-C does: sockets closed
    if hasattr(os, "sched_setscheduler"):  # normal scheduling whatever it inherited: a robot's clock is not this machine's to starve
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    with MujocoSimulator() as sim:
        robot = sim.add_robot(initial_q=q0)
        with SimulationServer(sim, hostname_candidates=[args.hostname]) as server:
            print(f"{READY} {robot.hostname}", flush=True)
            try:
                server.run_forever()
            except KeyboardInterrupt:
                pass


if __name__ == "__main__":
    main()
