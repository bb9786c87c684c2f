"""The L1-L6 progressive cognitive evaluation: scenario format, shipped scenarios, scoring."""
