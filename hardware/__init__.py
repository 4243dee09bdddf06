"""Joint-drive interfaces, simulated plant and the real-time loop (not built yet)."""
