"""Flexibility as extra joints: rigid finite elements, the elastic base, springs and dampers, modal analysis."""
