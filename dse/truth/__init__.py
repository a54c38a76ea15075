"""Truth: measured runs, the calibration fitted to them, and the seed-001 reference it is checked against."""
