"""Friction identification: experiments through a joint interface, processing, fitting, reports.

- :mod:`mbctl.identification.plan` — experiment plans and the reference motion they give;
- :mod:`mbctl.identification.experiments` — running them with host-side loops in torque mode;
- :mod:`mbctl.identification.logs` — LOG.csv / PRE.csv formats;
- :mod:`mbctl.identification.processing` — constant-speed segments -> friction points, gravity profile;
- :mod:`mbctl.identification.fitting` — Coulomb–viscous, Stribeck, LuGre-static fits with uncertainty;
- :mod:`mbctl.identification.presliding` — sigma0, sigma1, break-away torque;
- :mod:`mbctl.identification.pipeline`, :mod:`mbctl.identification.report` — the whole chain, text/JSON, TOML write-back;
- :mod:`mbctl.identification.servo` — position-controlled servos fitted to logs of ordinary motions;
  its bench and logs in :mod:`mbctl.identification.servo_log`, the simulated servo in
  :mod:`mbctl.identification.servo_model`;
- :mod:`mbctl.identification.synthetic`, :mod:`mbctl.identification.accuracy` — synthetic logs with a known truth.
"""
