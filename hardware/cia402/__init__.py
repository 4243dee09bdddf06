"""CiA 402 joint drives on CANopen: the objects and units (``objects``, ``units``), the host driver
(``bus``) on python-can and canopen, and a drive emulator backed by the simulated plant (``emulator``)."""
