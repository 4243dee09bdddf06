"""Joint friction from its spec: the law and load-model objects of :mod:`mbctl.dynamics.friction`.

The schema (law names and their parameters) is :mod:`mbctl.config.joints`; the physical
ranges (``fs >= fc``, dissipative LuGre, ...) are checked here, when the objects are
built, and an error is placed at the spec's file and field.
"""

from __future__ import annotations

from mbctl.config.joints import FrictionSpec
from mbctl.dynamics.friction.laws import LAWS, JointFriction
from mbctl.dynamics.friction.loads import LOAD_MODELS
from mbctl.errors import ConfigError

__all__ = ["joint_friction"]


def joint_friction(spec: FrictionSpec) -> JointFriction:
    """The :class:`JointFriction` a spec describes.

    Raises:
        ConfigError: For an unknown law or model, or parameters out of their physical
            range, located at ``spec.field`` of ``spec.file``.
    """
    try:
        if spec.law not in LAWS:
            raise ConfigError(f"unknown friction law {spec.law!r} (expected one of: {', '.join(LAWS)})", field="law")
        law = LAWS[spec.law](**spec.parameters)
        load = None
        if spec.load is not None:
            if spec.load.model not in LOAD_MODELS:
                raise ConfigError(f"unknown load model {spec.load.model!r} (expected one of: {', '.join(LOAD_MODELS)})", field="load.model")
            try:
                load = LOAD_MODELS[spec.load.model](**spec.load.parameters)
            except ConfigError as exc:
                raise exc.located(prefix="load") from None
    except ConfigError as exc:
        raise exc.located(file=spec.file, prefix=spec.field) from None
    except TypeError as exc:  # parameter names off the schema, from a spec built in Python
        raise ConfigError(f"bad parameters for {spec.law}: {exc}", file=spec.file, field=spec.field) from None
    return JointFriction(law=law, load=load)  # type: ignore[arg-type]
