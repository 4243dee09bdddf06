"""Programmed and closed-loop constraints: constraint kinds, targets, solvers, reactions and solvability."""
