"""tansaku: data_cards."""
