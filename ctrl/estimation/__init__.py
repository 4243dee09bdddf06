"""State estimation for the closed loop: velocity estimators and the generalized-momentum observer.

- :mod:`~mbctl.ctrl.estimation.settings`: the ``[control]`` choices checked against the robot;
- :mod:`~mbctl.ctrl.estimation.filters`: gains of the first-order and alpha-beta filters for a cutoff;
- :mod:`~mbctl.ctrl.estimation.model`: the robot's dynamics as the estimators and the observer use them;
- :mod:`~mbctl.ctrl.estimation.step`: one estimation step as a CasADi function (compiled like the laws);
- :mod:`~mbctl.ctrl.estimation.estimator`: :class:`StateEstimator`, what the loop calls each cycle;
- :mod:`~mbctl.ctrl.estimation.offline`: the observer over a measured log.
"""
