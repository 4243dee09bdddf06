"""Friction identification: experiments through a joint interface, processing, fitting, reports.

- :mod:`identification.plan` — experiment plans and the reference motion they give;
- :mod:`identification.experiments` — running them with host-side loops in torque mode;
- :mod:`identification.logs` — LOG.csv / PRE.csv formats;
- :mod:`identification.processing` — constant-speed segments -> friction points, gravity profile;
- :mod:`identification.fitting` — Coulomb–viscous, Stribeck, LuGre-static fits with uncertainty;
- :mod:`identification.presliding` — sigma0, sigma1, break-away torque;
- :mod:`identification.pipeline`, :mod:`identification.report` — the whole chain, text/JSON, TOML write-back;
- :mod:`identification.synthetic`, :mod:`identification.accuracy` — synthetic logs with a known truth.
"""
