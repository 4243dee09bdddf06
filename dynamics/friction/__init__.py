"""Joint friction: the laws (Coulomb–viscous, Stribeck, LuGre) and load-dependent normal loads."""
