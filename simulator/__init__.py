"""edgeops.simulator: hardware model from a board, traffic and timing models, graph simulation."""
