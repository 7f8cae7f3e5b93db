"""Graph passes: clean-ups and fusions into ai.edgeops ops."""
