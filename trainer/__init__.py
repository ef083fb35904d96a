"""tansaku: trainer."""
