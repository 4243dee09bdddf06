"""Bundled robot descriptions (URDF + TOML), shipped as package data and addressed by name."""
