"""Forward simulation: integrators, run set-up from specs, the variant study and the plant stepper."""
