"""Robot models: URDF parsing, the TOML joint overlay, model edits, frames and joint wrenches."""
