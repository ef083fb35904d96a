"""tansaku: pipelines."""
