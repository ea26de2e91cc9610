"""The trajectory warehouse: agent trajectories from Harbor runs and Hub datasets, in SQL."""

__version__ = "0.1.0"
