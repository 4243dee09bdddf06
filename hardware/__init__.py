"""Joint-drive interfaces (simulated plant, Dynamixel bus), the drive emulator and the real-time loop."""
