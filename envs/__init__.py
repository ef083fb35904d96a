"""tansaku: envs."""
