"""ROS 2 at run time: rclpy from PyPI (``pip install "mbctl[ros2]"``) or a sourced ROS 2 installation."""
