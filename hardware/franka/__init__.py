"""The Franka Research 3 in torque control over FCI through libfranka's own client (pylibfranka), and franky-sim, an FR3 in MuJoCo behind the same protocol."""
