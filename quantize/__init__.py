"""edgeops.quantize: INT8 post-training quantization (calibration, observers, QDQ export)."""
